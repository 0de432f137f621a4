"""Under torchrun an error in one process reaches every process at the next gather (it does
not leave the others waiting for ever), named by rank and reason, with its kind kept so each
process handles it as one process would."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from posx.errors import ConfigError, PosxError
from posx.runtime.distributed import World
from posx.runtime.outcomes import Failure, _Done, from_main, gather_outcomes, settle, together
from tests.conftest import REPO


def test_a_failure_is_raised_on_the_others_as_its_kind_naming_the_rank():
    oom = Failure.of(RuntimeError("CUDA out of memory\nmore detail"), 1)
    named = r"^rank 1 of 2 failed: RuntimeError: CUDA out of memory$"
    with pytest.raises(RuntimeError, match=named):
        settle([_Done([1]), oom], 0, 2)
    refused = Failure.of(ConfigError("length 10 is too short"), 2)
    with pytest.raises(ConfigError, match="rank 2 of 3 failed: ConfigError: length 10"):
        settle([_Done(1), _Done(2), refused], 0, 3)
    assert settle([_Done("a"), _Done("b")], 1, 2) == ["a", "b"]


def test_a_kind_that_cannot_travel_or_be_rebuilt_is_a_posx_error():
    class Local(Exception):
        pass

    class TwoArgs(Exception):
        def __init__(self, a: str, b: str) -> None:
            super().__init__(a, b)

    local = Failure.of(Local("mine"), 1)
    assert local.kind is None and type(local.error(2)) is PosxError
    err = Failure.of(TwoArgs("x", "y"), 0).error(2)
    assert type(err) is PosxError and str(err).startswith("rank 0 of 2 failed: TwoArgs")


def test_one_process_runs_the_work_and_raises_its_own_error():
    one = World()
    assert gather_outcomes(lambda: 3, one) == [3] and from_main(lambda: "x", one) == "x"
    with pytest.raises(ValueError, match="bad"), together(one):
        raise ValueError("bad")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_meet_at_the_next_gather_after_one_fails():
    """Two gloo processes, rank 1's generation out of memory: both exit within the timeout,
    rank 1 with its own error, rank 0 with it named, and both answer the next gather (before
    the fix rank 1 skipped the gather and rank 0 waited for ever)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "WORLD_SIZE": "2",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
           "POSX_TEST_FAIL_RANK": "1"}  # fmt: skip
    script = str(REPO / "tests" / "unit" / "runtime" / "two_ranks.py")
    procs = [
        subprocess.Popen([sys.executable, script], env={**env, "RANK": str(r),
                         "LOCAL_RANK": str(r)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
        for r in range(2)
    ]  # fmt: skip
    start, outs = time.monotonic(), []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=max(1.0, 60 - (time.monotonic() - start))))
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    said = outs[0][0] + outs[1][0]
    assert "RANK 1 RuntimeError: CUDA out of memory (made by the test)" in said
    assert "RANK 0 RuntimeError: rank 1 of 2 failed: RuntimeError: CUDA out of memory" in said
    assert "RANK 0 next [[0], [1], [2], [3], [4]]" in said
    assert "RANK 1 next [[0], [1], [2], [3], [4]]" in said
