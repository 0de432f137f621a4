"""Claims paired by lineage, through ``posx check``: an extension at seed s starts from its base
at seed s, so a comparison with its base (or with a sibling extension of the same bases) counts
the parents, not every seed against every seed."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from tests.unit.claims.test_claims_check import write_claims

BASES = [2.50, 2.55, 2.60]  # bpb at L=16: the bases differ by 0.05 across seeds
YARN = [v - 0.02 for v in BASES]  # each extension 0.02 below its own base
LINEAR = [v - 0.01 for v in BASES]


def _run(root: Path, name: str, label: str, seed: int, bpb: float, parent: str | None) -> None:
    run = root / "runs" / name
    run.mkdir(parents=True)
    info = {"schema_version": 1, "run": name, "encoding": label, "task": "text", "model": "tiny",
            "seed": seed, "train_length": 16, "experiment": "lineage_claims", "status": "trained",
            "fingerprint": f"fp-{label}"}  # fmt: skip
    if parent is not None:
        info["parent"] = {"run": parent, "dir": str(root / "runs" / parent),
                          "fingerprint": "fp-rope", "label": "rope", "step": 10}  # fmt: skip
    (run / "run.json").write_text(json.dumps(info))
    row = {k: info[k] for k in ("schema_version", "run", "encoding", "task", "model", "seed")}
    row |= {"train_length": 16, "mode": "full", "overrides": "", "eval_length": 16, "window": 16,
            "stride": 16, "status": "ok", "reason": "", "loss": bpb, "bpb": bpb}  # fmt: skip
    pd.DataFrame([row]).to_csv(run / "eval.csv", index=False)


def _tree(root: Path) -> None:
    for seed in range(3):
        base = f"text_rope_s{seed}"
        _run(root, base, "rope", seed, BASES[seed], None)
        _run(root, f"text_yarn_s{seed}", "rope+yarn×4+ft@64", seed, YARN[seed], base)
        _run(root, f"text_linear_s{seed}", "rope+linear×4+ft@64", seed, LINEAR[seed], base)


def test_an_extension_and_its_base_pair_by_the_parent(cli, tmp_path):
    _tree(tmp_path / "results")
    write_claims(tmp_path / "conf", "lineage_claims", {
        "over_base": ("rope+yarn×4+ft@64 < rope at L=16", ""),
        "siblings": ("rope+yarn×4+ft@64 < rope+linear×4+ft@64 at L=16", ""),
    })  # fmt: skip
    result = cli("--config-dir", str(tmp_path / "conf"), "check", str(tmp_path / "results"),
                 "-f", "md")  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    # every seed against every seed would be 6/9 ("seeds split"); by parent it is 3/3
    assert "| ✓ holds | lineage_claims/over_base |" in result.stdout
    assert "rope+yarn×4+ft@64 < rope: 3/3" in result.stdout
    assert "rope+yarn×4+ft@64 < rope+linear×4+ft@64: 3/3" in result.stdout


def test_unrelated_runs_stay_unpaired(cli, tmp_path):
    root = tmp_path / "results"
    _tree(root)
    for seed in range(3):  # the same values, but the extensions name another base line
        info = json.loads((root / "runs" / f"text_yarn_s{seed}" / "run.json").read_text())
        info["parent"]["fingerprint"] = "fp-elsewhere"
        (root / "runs" / f"text_yarn_s{seed}" / "run.json").write_text(json.dumps(info))
    claim = ("rope+yarn×4+ft@64 < rope at L=16", "")
    write_claims(tmp_path / "conf", "lineage_claims", {"a": claim})
    result = cli("--config-dir", str(tmp_path / "conf"), "check", str(root), "-f", "md")
    assert result.returncode == 3, result.stdout + result.stderr
    assert "6 of 9 seed comparisons" in result.stdout


def test_eval_time_variants_of_one_run_pair_by_the_run(cli, tmp_path):
    """`rope+yarn×4` is the `rope` run's own weights evaluated with a scaling (eval.variants):
    the two rows of one seed are one model, so they pair by run (3/3), not 6 of 9."""
    root = tmp_path / "results"
    for seed in range(3):
        _run(root, f"text_rope_s{seed}", "rope", seed, BASES[seed], None)
        frame = pd.read_csv(root / "runs" / f"text_rope_s{seed}" / "eval.csv")
        scaled = frame.assign(overrides="encoding.scaling.type=yarn encoding.scaling.factor=4",
                              loss=YARN[seed], bpb=YARN[seed])  # fmt: skip
        pd.concat([frame, scaled]).to_csv(root / "runs" / f"text_rope_s{seed}" / "eval.csv",
                                          index=False)  # fmt: skip
    write_claims(tmp_path / "conf", "lineage_claims", {"v": ("rope+yarn×4 < rope at L=16", "")})
    result = cli("--config-dir", str(tmp_path / "conf"), "check", str(root), "-f", "md")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rope+yarn×4 < rope: 3/3" in result.stdout
