"""Which sweeps must find their device on this machine before any run starts."""

from __future__ import annotations

import pytest

from posx.runs.preflight import runs_here


@pytest.mark.parametrize(
    ("overrides", "here"),
    [
        ([], True),
        (["hydra/launcher=basic"], True),
        (["hydra/launcher=local_parallel", "seed=0,1"], True),
        # a SLURM sweep is launched from a login node without the GPUs its jobs get
        (["hydra/launcher=slurm"], False),
        (["+hydra/launcher=slurm"], False),
    ],
)
def test_only_local_launchers_check_the_device_here(overrides, here):
    assert runs_here(overrides) is here
