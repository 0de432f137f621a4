"""``posx extend``: context extension by fine-tuning, through the command a user types.

One tiny RoPE base (copy task, trained at 16) is extended by every method of
configs/extension/ in one ``posx extend -m`` sweep, in this process (fast); the other tests
extend it again or damage a copy of it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from posx.config.compose import CONFIG_DIR, compose
from tests.conftest import TINY

METHODS = sorted(p.stem for p in (CONFIG_DIR / "extension").glob("*.yaml"))
BASE = [*TINY, "encoding=rope", "train.steps=4", "eval.lengths=[16,64]", "eval.tokens=64"]
# every method: to 64 (the default: extend.factor 4 x the base's 16), 2 steps
FT = ["extend.steps=2", "extend.warmup_steps=1"]
LABELS = {
    "pi": "rope+linear×4+ft@64",
    "ntk": "rope+ntk×4+ft@64",
    "yarn": "rope+yarn×4+ft@64",
    "llama3": "rope+llama3×4+ft@64",
    "longrope": "rope+longrope×4+ft@64",  # its factors searched first
    "plain": "rope+ft@64",
    "pose": "rope+pose+ft@16",
    "control": "rope+ft@16",
}


def _runs(root: Path) -> dict[str, Path]:
    """Run directory per run.json label under ``root``."""
    out = {}
    for info in root.rglob("run.json"):
        out[json.loads(info.read_text())["encoding"]] = info.parent
    return out


def _snapshot(run: Path) -> dict[str, tuple[str, int]]:
    """Every file of a run with its hash and modification time."""
    return {
        str(p.relative_to(run)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(run.rglob("*"))
        if p.is_file()
    }


def _posx(*args: str) -> None:
    """``posx ARGS`` in this process (the module's fixtures cannot use the ``cli`` fixture)."""
    import sys

    from posx.cli import main

    argv = sys.argv
    sys.argv = ["posx", *args]
    try:
        main()
    except SystemExit as exit_:
        assert not exit_.code, exit_.code
    finally:
        sys.argv = argv


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A trained tiny RoPE run."""
    root = tmp_path_factory.mktemp("extend")
    _posx("train", *BASE, f"root={root}")
    (run,) = root.glob("runs/*")
    return run


@pytest.fixture(scope="module")
def extended(base: Path) -> dict[str, Path]:
    """Every method of configs/extension/ applied to ``base`` by one ``posx extend -m``; the
    base's files are recorded before and checked after."""
    before = _snapshot(base)
    _posx("extend", "-m", str(base), f"extension={','.join(METHODS)}", *FT)
    assert _snapshot(base) == before  # the parent's directory is never written
    return _runs(base.parent.parent)


def test_every_method_extends_with_its_label_and_lineage(base, extended):
    parent = json.loads((base / "run.json").read_text())
    assert set(METHODS) - set(LABELS) == {"longlora"}  # a transformers model's, skipped here
    for method in LABELS:
        run = extended[LABELS[method]]
        info = json.loads((run / "run.json").read_text())
        assert info["status"] == "trained", method
        assert info["parent"]["dir"] == str(base.resolve())
        assert info["parent"]["fingerprint"] == parent["fingerprint"]
        assert info["parent"]["step"] == 4 and len(info["parent"]["checkpoint_sha256"]) == 64
        assert info["extension"]["steps"] == 2  # a fresh schedule of the method's steps
        assert info["fingerprint"] != parent["fingerprint"]
        rows = pd.read_csv(run / "eval.csv")
        # its own length, 2x and 4x of it, and the parent's eval lengths
        assert set(rows["eval_length"]) == {16, 64, 128, 256}, method
        assert (rows["encoding"] == LABELS[method]).all()
        assert rows["overrides"].isna().all()  # the extension's own scaling, no variant
        metrics = pd.read_csv(run / "metrics.csv")
        assert metrics["lr"].max() <= 1e-3 < 3e-3  # its own fresh schedule, not the base's lr


def test_pose_spreads_positions_to_the_target(extended):
    cfg = compose_saved(extended[LABELS["pose"]])
    assert cfg.positions.target_length == 64 and cfg.train.length == 16


def compose_saved(run: Path):
    from posx.saved import SavedRun

    return SavedRun(run).config


def test_extension_is_evaluated_with_its_scaling_by_default(cli, extended):
    from posx.saved import SavedRun

    run = extended[LABELS["yarn"]]
    cfg = SavedRun(run).loadable_config([])
    assert cfg.encoding.scaling.type == "yarn" and cfg.encoding.scaling.factor == 4
    result = cli("eval", str(run), "--lengths", "32", "encoding.scaling.type=none")
    assert result.returncode == 0, result.stderr
    rows = pd.read_csv(run / "eval.csv")
    off = rows[rows["eval_length"] == 32]
    assert list(off["overrides"]) == ["encoding.scaling.type=none"]  # the row says what ran
    assert json.loads(off["scaling"].iloc[0])["type"] == "none"
    own = json.loads(rows[rows["overrides"].isna()]["scaling"].iloc[0])  # the run's own scaling
    assert own["type"] == "yarn" and own["factor"] == 4
    assert own["original_length"] == int(cfg.extend.base_length) != int(cfg.train.length)


def test_runs_shows_the_parent_and_report_groups_by_it(cli, base, extended):
    result = cli("runs", "--root", str(base.parent.parent), "--format", "json")
    lines = {r["encoding"]: r for r in json.loads(result.stdout)}
    assert lines[LABELS["yarn"]]["parent"] == base.name
    assert lines["rope"]["parent"] is None
    result = cli("report", "--root", str(base.parent.parent), "--by", "extend.parent_label",
                 "--by", "train_length")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "extend.parent_label=rope" in result.stdout and LABELS["yarn"] in result.stdout


def test_step_zero_logits_equal_the_parents_final_logits(base, tmp_path):
    """The extension starts from the parent's exact weights: with its scaling off, its model at
    step 0 computes the parent's logits (and its data order goes on from the parent's)."""
    from posx.config.build import build_model
    from posx.runs.extend.run import _launches, check_parent
    from posx.saved import SavedRun
    from posx.storage.checkpoint import load_checkpoint, load_trainer_tensors
    from posx.training.loop import prepare

    parent = check_parent(base, [], ())
    user = ["extension=yarn", *FT, "encoding.scaling.type=none"]
    (overrides,) = _launches(parent["run"], parent, user, [])
    cfg = compose(overrides)
    trainer, step, _, _ = prepare(cfg, tmp_path)
    assert step == 0 and cfg.train.length == 64
    saved = SavedRun(base).loadable_config([])
    original = build_model(saved, trainer.task.vocab_size)
    load_checkpoint(base, original)
    tokens = torch.randint(0, trainer.task.vocab_size, (2, 64))
    pos = torch.arange(64)
    with torch.no_grad():
        assert torch.equal(trainer.model(tokens, pos), original(tokens, pos))
    assert torch.equal(trainer.data_rng.get_state(), load_trainer_tensors(base)["data"])


def test_interrupted_extension_resumes_bit_identical(cli, base, extended, monkeypatch):
    import posx.training.loop as loop

    class StopAfterOne(loop.StopOnInterrupt):
        """Ctrl-C after the first of two steps (checked at each step boundary)."""

        checks = 0

        @property
        def requested(self) -> bool:
            StopAfterOne.checks += 1
            return StopAfterOne.checks == 1

        @requested.setter
        def requested(self, value: bool) -> None:
            pass

    before = set(_runs(base.parent.parent).values())
    monkeypatch.setattr(loop, "StopOnInterrupt", StopAfterOne)
    result = cli("extend", str(base), "extension=yarn", *FT)
    assert result.returncode == 130, result.stderr
    monkeypatch.undo()
    (run,) = set(_runs(base.parent.parent).values()) - before
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"
    assert json.loads((run / "checkpoint" / "trainer.json").read_text())["step"] == 1
    result = cli("resume", str(run))
    assert result.returncode == 0, result.stderr
    straight = extended[LABELS["yarn"]]
    a = load_file(str(straight / "checkpoint" / "model.safetensors"))
    b = load_file(str(run / "checkpoint" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    la, lb = pd.read_csv(straight / "metrics.csv"), pd.read_csv(run / "metrics.csv")
    assert list(la["loss"]) == list(lb["loss"])


def test_extension_of_an_extension(cli, base, extended):
    """16 -> 64 -> 256: the default factor 4 counts from the parent's length, the scaling
    from the base's positions (yarn×16), and the label says that."""
    first = extended[LABELS["yarn"]]
    result = cli("extend", str(first), "extension=yarn", "extend.steps=1",
                 "eval.lengths=[256]")  # fmt: skip
    assert result.returncode == 0, result.stderr
    second = _runs(base.parent.parent)["rope+yarn×16+ft@256"]
    info = json.loads((second / "run.json").read_text())
    assert info["parent"]["dir"] == str(first.resolve())
    assert info["extension"]["base_length"] == 16 and info["extension"]["train_length"] == 256
    assert info["extension"]["encoding"]["scaling"]["factor"] == 16


def test_a_length_that_contradicts_the_factor_is_one_warning(cli, base):
    result = cli("extend", str(base), "extension=yarn", "extend.length=32", "extend.steps=1",
                 "eval.lengths=[32]")  # fmt: skip
    assert result.returncode == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if "warning" in line]
    assert len(warned) == 1 and "extend.length=32" in warned[0], result.stderr
    assert "extend.factor=4 says 64" in warned[0]


def test_a_sweep_of_extensions_says_what_the_user_chose_and_compares_with_the_parent(
    cli, base, tmp_path
):
    """Issue 57.7: `extend -m` printed each job's line with posx's own keys
    (extend.parent_sha256=...), and suggested `posx report --root SWEEP`, which leaves out
    the parent the extensions are compared with."""
    root = tmp_path / "results"
    parent = Path(shutil.copytree(base, root / "runs" / base.name))
    result = cli(
        "extend",
        "-m",
        str(parent),
        "extension=pi,yarn",
        *FT,
        "eval.lengths=[16,64]",
        f"root={root}",
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout + result.stderr
    jobs = [line for line in out.splitlines() if "#0 : " in line or "#1 : " in line]
    assert len(jobs) == 2 and all("extension=" in line for line in jobs), out
    for key in ("extend.parent_sha256", "extend.parent_fingerprint", "extend.base_factor",
                "invocation="):  # fmt: skip
        assert key not in out, key
    assert f"posx report --root {root}    # compare the sweep's runs with their parent" in out


@pytest.mark.parametrize(
    "user",
    [
        ["extension=yarn"],
        ["extension=pose"],
        ["extension=pi", "extend.length=64"],
        ["extension=plain", "extend.factor=2", "eval.lengths=[16]"],
    ],
)
def test_a_launch_config_equals_composing_its_overrides(base, user):
    """Issue 53: a launch's config is its probe with the lengths set (one compose, not two);
    it must equal what Hydra composes from the launch's overrides, which the job will run."""
    from omegaconf import OmegaConf

    from posx.runs.extend.length import launch_lengths
    from posx.runs.extend.run import _merged, check_parent

    parent = check_parent(base, [], ())
    keys = {o.split("=", 1)[0] for o in user}
    placeholder = [] if "extend.length" in keys else [f"extend.length={parent['cfg'].train.length}"]
    probe = compose([*_merged(parent, user, []), *placeholder])
    lengths = launch_lengths(probe, parent["cfg"], keys)
    composed = compose([*_merged(parent, user, []), *lengths.settings()])
    applied = lengths.applied(probe)
    assert OmegaConf.to_container(applied, resolve=True) == OmegaConf.to_container(
        composed, resolve=True
    )
    assert OmegaConf.to_yaml(applied) == OmegaConf.to_yaml(composed)


def test_each_combination_is_composed_and_built_once(cli, base, tmp_path, monkeypatch):
    """Issue 53: the plan checked each combination, then the launch composed, validated and
    built it again (a second compose and model build per launch)."""
    from posx.config import compose as compose_module
    from posx.runs import preflight

    composed, compose_ = [], compose_module.hydra_compose
    monkeypatch.setattr(
        compose_module, "hydra_compose", lambda *a, **k: composed.append(k) or compose_(*a, **k)
    )
    built, build = [], preflight.check_buildable
    monkeypatch.setattr(
        preflight, "check_buildable", lambda cfg, *a: built.append(cfg) or build(cfg, *a)
    )
    root = tmp_path / "results"
    parent = Path(shutil.copytree(base, root / "runs" / base.name))
    result = cli("extend", "-m", str(parent), "extension=pi,yarn", *FT, "eval.lengths=[16]",
                 f"root={root}")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert len(_runs(root)) == 3  # the parent and its two extensions
    assert sorted(c.encoding.scaling.type for c in built) == ["linear", "yarn"]
    # the parent's config and one per combination (its lengths then set on it): 3 (4 while
    # posx composed the sweep's directory too, 6 when each launch config was composed again)
    assert len(composed) == 3, [k["overrides"][-3:] for k in composed]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["extend.factor=0.5"], "extend.factor must be >= 1 (an extension fine-tunes at "
                                "extend.factor × the parent's train.length 16), got 0.5"),
        (["--dryrun"], "posx extend has no option --dryrun; did you mean --dry-run?"),
    ],
)  # fmt: skip
def test_a_mistake_is_named_as_the_user_wrote_it(cli, base, args, said):
    before = sorted(p.name for p in base.parent.iterdir())
    result = cli("extend", str(base), "extension=yarn", *FT, *args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], lines
    assert sorted(p.name for p in base.parent.iterdir()) == before


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_device_this_machine_lacks_is_refused_before_any_run_folder(cli, base):
    before = sorted(p.name for p in base.parent.iterdir())
    result = cli("extend", str(base), "extension=yarn", *FT, "train.device=cuda")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "train.device=cuda but CUDA is not available" in lines[0], lines
    assert sorted(p.name for p in base.parent.iterdir()) == before


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        ("missing", "run directory does not exist"),
        ("truncated", "truncated or corrupt"),
        ("untrusted", "cannot ask to run code"),
        ("unfinished", "not trained to its last step"),
    ],
)
def test_a_bad_parent_is_one_line_and_exit_2(cli, base, tmp_path, damage, said):
    run = tmp_path / "runs" / base.name
    shutil.copytree(base, run)
    if damage == "missing":
        shutil.rmtree(run)
    elif damage == "truncated":
        path = run / "checkpoint" / "model.safetensors"
        path.write_bytes(path.read_bytes()[:-100])
    elif damage == "untrusted":
        path = run / ".hydra" / "overrides.yaml"
        path.write_text(path.read_text() + "- +encoding.evil._target_=os.system\n")
    else:
        info = json.loads((run / "run.json").read_text())
        (run / "run.json").write_text(json.dumps({**info, "status": "interrupted"}))
    result = cli("extend", str(run), "extension=yarn", *FT)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], result.stderr
    assert not (tmp_path / "runs").exists() or len(list((tmp_path / "runs").iterdir())) <= 1


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("model.d_model=64", "model.d_model=64 changes the shape of"),
        ("task=reverse", "an extension trains on its parent's data"),
        ("extend.parent=/x", "posx extend sets extend.parent itself"),
    ],
)
def test_overrides_that_change_shapes_or_data_are_refused(cli, base, override, said):
    result = cli("extend", str(base), "extension=plain", *FT, override)
    assert result.returncode == 2 and said in result.stderr, result.stderr


def test_learned_table_needs_an_explicit_resize(cli, tmp_path):
    args = [*BASE, "encoding=learned", "eval.lengths=[16]", f"root={tmp_path}"]
    assert cli("train", *args).returncode == 0
    (run,) = tmp_path.glob("runs/*")
    result = cli("extend", str(run), "extension=plain", *FT)
    assert result.returncode == 2
    assert "train.length=64" in result.stderr or "extension=plain" in result.stderr
    assert "extend.resize=interpolate or extend.resize=copy" in result.stderr
    result = cli("extend", str(run), "extension=plain", *FT, "extend.resize=copy")
    assert result.returncode == 0, result.stderr
    ext = [r for r in _runs(tmp_path).values() if r != run][0]
    table = load_file(str(ext / "checkpoint" / "model.safetensors"))["encoding.table.weight"]
    assert table.shape[0] == 64


def test_learned_resize_rules():
    from posx.encodings.learned import Learned

    old = torch.arange(8.0).repeat(2, 1).t()  # rows 0..7, [8, 2]
    grown = Learned(2, 16)
    copy = grown.resize_parameter("table.weight", old, "copy")
    assert torch.equal(copy[8:], old) and torch.equal(copy[:8], old)
    inter = grown.resize_parameter("table.weight", old, "interpolate")
    assert inter.shape == (16, 2) and inter[0, 0] == 0 and inter[-1, 0] == 7
    assert torch.all(inter[1:, 0] >= inter[:-1, 0])  # monotone, like the positions it stands for
    with pytest.raises(ValueError):
        grown.resize_parameter("table.weight", old, "stretch")


def test_the_preset_and_every_method_compose():
    cfg = compose(["experiment=context_extension"])
    assert cfg.train.length == 64 and cfg.eval.lengths[-1] == 1024
    from posx.runs.extend.methods import misfit

    for method in METHODS:
        if misfit(method, cfg.encoding, []) is not None:  # LongLoRA: pretrained models only
            continue
        ext = compose(["experiment=context_extension", f"extension={method}"])
        assert ext.train.steps == cfg.extend.steps and ext.eval.variants == []
        assert ext.extend.length is None  # set by posx extend: factor x the parent's length
