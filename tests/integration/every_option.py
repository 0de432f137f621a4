"""What the two every-option modules share: the options, the tiny config, the results root
they build through the CLI, and the checks of each option's rows and report line.

Two modules, not one: `make test` keeps a module on one worker (``--dist loadscope``), and one
module of every option was the suite's longest item (77 s); its halves run on two workers.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from posx.config.compose import CONFIG_DIR
from posx.encodings.rope_scaling import SCALING_TYPES

ENCODINGS = sorted(p.stem for p in (CONFIG_DIR / "encoding").glob("*.yaml"))
STRATEGIES = sorted(
    p.stem for p in (CONFIG_DIR / "positions").glob("*.yaml") if p.stem != "default"
)
SCALINGS = [s for s in SCALING_TYPES if s != "none"]
# rope's scalings are evaluated on the plain rope run, so they go with the half that trains it
HALVES = {
    "a": (ENCODINGS[::2], STRATEGIES, []),
    "b": (ENCODINGS[1::2], [], SCALINGS),
}
assert "rope" in HALVES["b"][0]
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


def build_root(
    root: Path, encodings: list[str], strategies: list[str], scalings: list[str]
) -> Path:
    """A results root with a run of each encoding and of rope with each position strategy,
    each rope scaling evaluated on the rope run, and everything evaluated again at 16 and 32."""
    from tests.conftest import run_posx

    run_posx("train", "-m", f"encoding={','.join(encodings)}", *TINY, f"root={root}", check=True)
    if strategies:
        run_posx("train", "-m", "encoding=rope", f"positions={','.join(strategies)}", *TINY,
                 f"root={root}", check=True)  # fmt: skip
    if scalings:
        (rope,) = [p.parent for p in root.rglob("copy_rope_L16_*/run.json")]
        for scaling in scalings:
            scale = [f"encoding.scaling.type={scaling}", "encoding.scaling.factor=2"]
            run_posx("eval", str(rope), "--lengths", "32", "--no-progress", *scale, check=True)
    run_posx("eval", "--root", str(root), "--lengths", "16,32", "--no-progress", check=True)
    return root


def rows(root: Path) -> pd.DataFrame:
    frames = [
        pd.read_csv(p, dtype={"overrides": str}).fillna({"overrides": ""})
        for p in root.rglob("eval.csv")
    ]
    return pd.concat(frames, ignore_index=True)


def report_of(root: Path) -> str:
    from tests.conftest import run_posx

    return run_posx("report", "--root", str(root), "--metric", "loss", check=True).stdout


def check_option(root: Path, report: str, label: str) -> None:
    """The option's run has ok rows at 16 and 32 (learned: 16 only) and a report line."""
    mine = rows(root).query("encoding == @label and overrides == ''")
    assert sorted(mine["eval_length"]) == [16, 32], f"{label}: {mine.to_dict('records')}"
    ok = mine[mine["status"] == "ok"]
    assert len(ok) == 2 or label == "learned", mine[["eval_length", "status", "reason"]]
    assert (ok["loss"] > 0).all()
    assert f"\n│ {label} " in report or f"│ {label} " in report, report


def check_scaling(root: Path, report: str, scaling: str) -> None:
    """The rope run has one ok row evaluated with the scaling, shown as rope+TYPE×2."""
    mine = rows(root).query("encoding == 'rope' and overrides.str.contains(@scaling)")
    mine = mine[mine["overrides"].str.contains(f"encoding.scaling.type={scaling}")]
    assert len(mine) == 1 and mine["status"].iloc[0] == "ok", mine.to_dict("records")
    assert f"rope+{scaling}×2" in report, report
