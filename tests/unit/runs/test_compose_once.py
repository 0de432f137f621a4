"""posx.runs.compose_once: within one launch, Hydra composes each distinct config once, and the
jobs run with the configs Hydra would have composed itself."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from posx.runs import compose_once, launch
from posx.runs.compose_once import composes_shared
from tests.conftest import TINY, run_in_process


@pytest.fixture
def composes(monkeypatch) -> list[tuple[str, list[str]]]:
    """Every compose Hydra really makes (below the memo): ``(run mode, overrides)``."""
    made: list[tuple[str, list[str]]] = []
    real = ConfigLoaderImpl.load_configuration

    def counted(self, config_name, overrides, run_mode, from_shell=True,
                validate_sweep_overrides=True):  # fmt: skip
        made.append((run_mode.name, list(overrides)))
        return real(self, config_name, overrides, run_mode, from_shell, validate_sweep_overrides)

    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", counted)
    return made


def _sweep(root: Path, *extra: str) -> list[Path]:
    args = ["-m", "encoding=nope,rope", *TINY, "train.steps=1", "eval.lengths=[16]",
            "eval.tokens=32", f"root={root}", "invocation=20261129-000000_abcdef",
            *extra]  # fmt: skip
    result = run_in_process("train", *args)
    assert result.returncode == 0, result.stderr
    return sorted(p.parent for p in root.rglob("run.json"))


def test_a_sweep_composes_each_config_once(tmp_path, composes):
    """Hydra alone composes the sweep's config twice (to read hydra.mode, then to run) and each
    job's twice (to check the batch, then to launch it): 2 + 2 x 2 for two jobs. Now 1 + 2."""
    runs = _sweep(tmp_path)
    assert len(runs) == 2
    sweep = [o for mode, o in composes if mode == "MULTIRUN"]
    # a job's config: Hydra's own overrides of the sweep first, then the job's
    jobs = [o for mode, o in composes if mode == "RUN" and o[0] == "hydra.mode=MULTIRUN"]
    assert len(sweep) == 1, composes
    assert sorted(o[1] for o in jobs) == ["encoding=nope", "encoding=rope"], composes
    # and posx's check of each value: nothing else (the sweep's directory is Hydra's word,
    # posx.runs.callbacks, not a compose of its own)
    assert len(composes) == 2 + 1 + 2, composes


def test_the_sweep_directory_is_named_first_and_summed_up_last(tmp_path):
    """Hydra's callback names the sweep's directory before the first job starts; without it (a
    user took it away) posx still finds the directory for the summary."""
    one = ["train", "-m", "encoding=nope", *TINY, "train.steps=1", "eval.lengths=[16]",
           "eval.tokens=32"]  # fmt: skip
    out = run_in_process(*one, f"root={tmp_path / 'with'}").stdout.splitlines()
    (sweep,) = (tmp_path / "with" / "sweeps").iterdir()
    assert out[0] == f"sweep directory: {sweep}" and f"sweep done: 1 job(s) in {sweep}" in out
    taken = run_in_process(*one, f"root={tmp_path / 'without'}",
                           "~hydra.callbacks.sweep_directory").stdout  # fmt: skip
    (alone,) = (tmp_path / "without" / "sweeps").iterdir()
    assert "sweep directory:" not in taken and f"sweep done: 1 job(s) in {alone}" in taken


@pytest.mark.parametrize("held", [compose_once.HELD, 1])
def test_the_jobs_get_the_configs_hydra_composes_itself(tmp_path, monkeypatch, composes, held):
    """The same sweep without the memo (and without posx naming hydra.mode: Hydra appends it
    itself) writes the same configs, Hydra's record included; so does a sweep of more jobs
    than the memo holds (each job's config is composed again for its launch, as Hydra does)."""
    monkeypatch.setattr(compose_once, "HELD", held)
    shared = _sweep(tmp_path / "shared")
    jobs = [o[1] for mode, o in composes if mode == "RUN" and o[0] == "hydra.mode=MULTIRUN"]
    assert jobs == ["encoding=nope", "encoding=rope"] * (2 if held == 1 else 1)
    monkeypatch.setattr(launch, "composes_shared", contextlib.nullcontext)
    monkeypatch.setattr(launch, "override_key", lambda o: "hydra.mode")  # "already given"
    alone = _sweep(tmp_path / "alone")
    assert [p.name for p in shared] == [p.name for p in alone]
    for a, b in zip(shared, alone, strict=True):
        for name in ("config.yaml", "overrides.yaml", "hydra.yaml"):
            mine = (a / ".hydra" / name).read_text().replace(str(tmp_path / "shared"), "ROOT")
            theirs = (b / ".hydra" / name).read_text().replace(str(tmp_path / "alone"), "ROOT")
            assert mine == theirs, name
        hydra = OmegaConf.load(a / ".hydra" / "hydra.yaml").hydra
        assert list(hydra.overrides.hydra).count("hydra.mode=MULTIRUN") == 1


def test_a_repeated_compose_is_a_copy_and_the_check_still_runs(tmp_path, composes):
    """Within the block the second compose of one config is a fresh copy (a caller may change
    its own); a compose that skipped Hydra's check of sweep overrides does not let a later call
    that asks for the check through; after the block Hydra composes as before."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    from posx.config.compose import CONFIG_DIR, register

    register()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        good = [*TINY, "encoding=alibi"]
        with composes_shared():
            first = loader.load_configuration("config", good, RunMode.RUN)
            first.train.steps = 12345
            second = loader.load_configuration("config", good, RunMode.RUN)
            assert len(composes) == 1 and second.train.steps != 12345
            bad = [*TINY, "hydra.job.chdir=true,false"]  # sweeping Hydra's own settings
            unchecked = loader.load_configuration("config", bad, RunMode.MULTIRUN,
                                                  validate_sweep_overrides=False)  # fmt: skip
            assert unchecked.hydra is not None
            with pytest.raises(ConfigCompositionException, match="Sweeping over Hydra"):
                loader.load_configuration("config", bad, RunMode.MULTIRUN)
        before = len(composes)
        loader.load_configuration("config", good, RunMode.RUN)
        assert len(composes) == before + 1
