"""Every option a user can pick goes through the commands a user types: each encoding yaml and
each position strategy is trained by ``posx train -m``, each RoPE scaling type evaluated by
``posx eval``, all of them evaluated again by ``posx eval --root`` and shown by ``posx report``.

Issue 30: a fresh clone passed every test while ``posx train encoding=deberta`` and
``encoding=xpos`` crashed, because no test went through the CLI for every option.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from posx.config.build import locate
from posx.config.compose import CONFIG_DIR
from posx.encodings.rope_scaling import SCALING_TYPES

ENCODINGS = sorted(p.stem for p in (CONFIG_DIR / "encoding").glob("*.yaml"))
POSITIONS = sorted(p.stem for p in (CONFIG_DIR / "positions").glob("*.yaml"))


def _needs_structure(group: str, name: str) -> bool:
    """Whether the option's class reads (positions) or needs (encodings) a task's numbers."""
    target = OmegaConf.load(CONFIG_DIR / group / f"{name}.yaml")._target_
    return bool(getattr(locate(target), "needs_structure", False))


# Positions that read a task's numbers, and encodings that need such positions, train on
# task=arithmetic (posx train refuses them elsewhere); an encoding of that kind with abacus.
STRUCTURED = [p for p in POSITIONS if _needs_structure("positions", p)]
PLAIN = [p for p in POSITIONS if p != "default" and p not in STRUCTURED]
NEEDS = [e for e in ENCODINGS if _needs_structure("encoding", e)]
SCALINGS = [s for s in SCALING_TYPES if s != "none"]
TINY = [
    "task=copy",
    "model.d_model=16",
    "model.n_heads=2",
    "model.n_layers=1",
    "model.d_ff=32",
    "train.length=16",
    "train.steps=2",
    "train.batch_size=4",
    "train.warmup_steps=1",
    "train.progress=false",
    "eval.lengths=[16]",
    "eval.tokens=64",
]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """One results root with a run of every encoding and every position strategy (those that
    read numbers on task=arithmetic), each rope scaling evaluated on the rope run, and
    everything evaluated again at 16 and 32 tokens (digits for arithmetic)."""
    from tests.conftest import run_in_process

    def posx(*args: str) -> None:
        # through posx.cli.main in this process: the same entry point without a torch import
        # per call (10 of them; `posx report` below runs in a subprocess)
        result = run_in_process(*args)
        assert result.returncode == 0, result.stderr

    def evaluate(*args: str) -> None:
        posx("eval", *args)

    root = tmp_path_factory.mktemp("every_option")
    encodings = ",".join(e for e in ENCODINGS if e not in NEEDS)
    posx("train", "-m", f"encoding={encodings}", *TINY, f"root={root}")
    posx("train", "-m", "encoding=rope", f"positions={','.join(PLAIN)}", *TINY, f"root={root}")
    numbers = [*TINY, "task=arithmetic", f"root={root}"]
    posx("train", "-m", "encoding=rope", f"positions={','.join(STRUCTURED)}", *numbers)
    posx("train", "-m", f"encoding={','.join(NEEDS)}", "positions=abacus", *numbers)
    (rope,) = [p.parent for p in root.rglob("copy_rope_L16_*/run.json")]
    for scaling in SCALINGS:
        scale = [f"encoding.scaling.type={scaling}", "encoding.scaling.factor=2"]
        if scaling == "longrope":  # per-dimension factors, one per rotated pair (d_h 8: 4)
            scale.append("+encoding.scaling.factors=[1.0,1.5,2.0,2.0]")
        evaluate(str(rope), "--lengths", "32", "--no-progress", *scale)
    evaluate("--root", str(root), "--lengths", "16,32", "--no-progress")
    return root


def rows(root: Path) -> pd.DataFrame:
    frames = [
        pd.read_csv(p, dtype={"overrides": str}).fillna({"overrides": ""})
        for p in root.rglob("eval.csv")
    ]
    return pd.concat(frames, ignore_index=True)


@pytest.fixture(scope="module")
def report(root: Path) -> str:
    from tests.conftest import run_posx

    return run_posx("report", "--root", str(root), "--metric", "loss", check=True).stdout


@pytest.mark.parametrize(
    "label",
    [
        *(f"{e}+abacus" if e in NEEDS else e for e in ENCODINGS),
        *(f"rope+{p}" for p in POSITIONS if p != "default"),
    ],  # fmt: skip
)
def test_every_option_trains_evaluates_and_reports(root: Path, report: str, label: str):
    mine = rows(root).query("encoding == @label and overrides == ''")
    assert sorted(mine["eval_length"]) == [16, 32], f"{label}: {mine.to_dict('records')}"
    ok = mine[mine["status"] == "ok"]
    assert len(ok) == 2 or label == "learned", mine[["eval_length", "status", "reason"]]
    assert (ok["loss"] > 0).all()
    assert f"\n│ {label} " in report or f"│ {label} " in report, report


@pytest.mark.parametrize("scaling", SCALINGS)
def test_every_rope_scaling_evaluates_and_reports(root: Path, report: str, scaling: str):
    mine = rows(root).query("encoding == 'rope' and overrides.str.contains(@scaling)")
    mine = mine[mine["overrides"].str.contains(f"encoding.scaling.type={scaling}")]
    assert len(mine) == 1 and mine["status"].iloc[0] == "ok", mine.to_dict("records")
    assert f"rope+{scaling}×2" in report, report
