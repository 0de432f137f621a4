"""Claims paired by lineage, through ``posx check``: an extension at seed s starts from its base
at seed s, so a comparison with its base (or with a sibling extension of the same bases) counts
the parents, not every seed against every seed."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.unit.claims.test_claims_check import write_claims
from tests.unit.report.report_trees import make_seed_tree

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
    save_run(run, info, bpb)


def save_run(run: Path, info: dict, bpb: float) -> None:
    """``run.json`` (``info``) and ``eval.csv`` with one row at L=16 of ``bpb`` in ``run``."""
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


# Issue 55, item 2: `posx extend -m RUN extension=pi,yarn seed=0,1,2`: three children of each
# method, every one from the base at seed 0 (bpb at L=16).
PI = [2.45, 2.42, 2.50]
YARN_ONE_PARENT = [2.40, 2.50, 2.45]
ROPE_BASES = [2.40, 2.70, 2.70]  # the children's parent (seed 0) is the best base


def _one_parent(root: Path) -> None:
    for seed in range(3):
        _run(root, f"text_rope_s{seed}", "rope", seed, ROPE_BASES[seed], None)
        _run(root, f"text_pi_s{seed}", "rope+linear×4+ft@64", seed, PI[seed], "text_rope_s0")
        _run(root, f"text_yarn_s{seed}", "rope+yarn×4+ft@64", seed, YARN_ONE_PARENT[seed],
             "text_rope_s0")  # fmt: skip


def _check_one_parent(cli, tmp_path: Path, statement: str) -> tuple[int, dict]:
    """``posx check -f json`` of one claim at L=16 on :func:`_one_parent`'s tree."""
    _one_parent(tmp_path / "results")
    write_claims(tmp_path / "conf", "lineage_claims", {"c": (f"{statement} at L=16", "")})
    result = cli("--config-dir", str(tmp_path / "conf"), "check", str(tmp_path / "results"),
                 "-f", "json")  # fmt: skip
    assert result.returncode in (0, 1, 3), result.stdout + result.stderr
    (verdict,) = json.loads(result.stdout)["claims"]
    return result.returncode, verdict


def test_siblings_of_one_parent_pair_by_their_own_seed(cli, tmp_path):
    """yarn seed s against pi seed s: 2 of 3 (seeds split, ?); grouping by the one parent gave
    one comparison of the two means, ✓ 1/1."""
    code, verdict = _check_one_parent(cli, tmp_path, "rope+yarn×4+ft@64 < rope+linear×4+ft@64")
    assert code == 3 and verdict["verdict"] == "inconclusive", verdict
    assert verdict["seed_agreement"] == "rope+yarn×4+ft@64 < rope+linear×4+ft@64: 2/3"


def test_children_against_their_parent_compare_means_over_the_same_runs(cli, tmp_path):
    """`rope+linear×4+ft@64 < rope`: each pi child against its own parent (base seed 0, 2.40),
    0 of 3; the mean side is the parent's, not the mean of every base (2.60), so the claim
    fails instead of holding on the mean and splitting on one comparison (0 of 1)."""
    code, verdict = _check_one_parent(cli, tmp_path, "rope+linear×4+ft@64 < rope")
    assert code == 1 and verdict["verdict"] == "fails", verdict
    assert verdict["seed_agreement"] == "rope+linear×4+ft@64 >= rope: 3/3"
    (note,) = verdict["notes"]
    assert "3 pair(s) of related runs (child with its parent)" in note
    assert "2 run(s) without a partner left out; means over the pairs 2.457 vs 2.400" in note


# Issue 55, item 3: four rope seeds, the eval-time variant row missing for seed 3 (bpb at 64).
ROPE_4 = [[2.0, 2.5, 3.0], [2.0, 2.5, 3.1], [2.0, 2.5, 3.2], [2.0, 2.5, 3.3]]
YARN_3 = [[2.1, 2.2, 2.95], [2.1, 2.2, 3.05], [2.1, 2.2, 3.15]]


def test_a_run_missing_one_row_leaves_the_others_paired(cli, tmp_path):
    """Each of the three runs with both rows has yarn below its own rope (3/3); every seed
    against every seed was 9 of 12, ?. The fourth run is left out, and the verdict says so."""
    make_seed_tree(tmp_path / "results", {"rope": ROPE_4, "rope+yarn×4": YARN_3},
                   experiment="lineage_claims")  # fmt: skip
    write_claims(tmp_path / "conf", "lineage_claims",
                 {"yarn_helps_4x": ("rope+yarn×4 < rope at 4x", "")})  # fmt: skip
    result = cli("--config-dir", str(tmp_path / "conf"), "check", str(tmp_path / "results"),
                 "-f", "md")  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "| ✓ holds | lineage_claims/yarn_helps_4x |" in result.stdout
    assert "rope+yarn×4 < rope: 3/3" in result.stdout
    assert "1 run(s) without a partner left out; means over the pairs 3.050 vs 3.100" in (
        result.stdout
    )


def test_pairing_rules_case_by_case():
    """posx.claims.lineage.pair_runs, each case of docs/reproductions.md: which values pair."""
    from posx.claims.lineage import pair_runs

    base = {s: (f"rope_s{s}|fp", "") for s in range(3)}
    rope = {0: 2.4, 1: 2.7, 2: 2.7}
    # an eval-time variant of the same runs, seed 2's row missing: run by run over seeds 0, 1
    got = pair_runs({0: 2.3, 1: 2.6}, base, rope, base)
    assert got is not None and got.how == "run by run"
    assert got.pairs == [(2.3, 2.4), (2.6, 2.7)] and got.unpaired == 1
    # children of base seed 0 at seeds 0-2, against the bases, on either side
    kids = {s: (f"pi_s{s}|fp-pi", "rope_s0|fp") for s in range(3)}
    pi = {0: 2.45, 1: 2.42, 2: 2.50}
    left = pair_runs(pi, kids, rope, base)
    right = pair_runs(rope, base, pi, kids)
    assert left is not None and right is not None and left.how == "child with its parent"
    assert left.pairs == [(2.45, 2.4), (2.42, 2.4), (2.50, 2.4)] and left.unpaired == 2
    assert right.pairs == [(y, x) for x, y in left.pairs]
    # siblings of one parent: by their own seed; with no seed in common, by the parent's mean
    yarn = {s: (f"yarn_s{s}|fp-yarn", "rope_s0|fp") for s in range(3)}
    got = pair_runs({0: 2.4, 1: 2.5, 2: 2.45}, yarn, pi, kids)
    assert got is not None and got.how == "by parent and seed" and len(got.pairs) == 3
    late = {s: (f"yarn_s{s}|fp-yarn", "rope_s0|fp") for s in (7, 8)}
    got = pair_runs({7: 2.4, 8: 2.6}, late, pi, kids)
    assert got is not None and got.how == "by parent"
    assert got.pairs == [(pytest.approx(2.5), pytest.approx(2.4567, abs=1e-4))]
    # unrelated lines (or a run whose lineage is unknown): None, every seed against every seed
    alibi = {s: (f"alibi_s{s}|fp-a", "") for s in range(3)}
    assert pair_runs({0: 1.0, 1: 1.0, 2: 1.0}, alibi, rope, base) is None
    assert pair_runs(rope, {0: ("", ""), 1: base[1], 2: base[2]}, rope, base) is None
