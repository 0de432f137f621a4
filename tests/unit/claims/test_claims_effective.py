"""``effective_length:`` claims through ``posx check``: each seed's RULER effective length (the
longest length whose ``ruler/average`` score, and every shorter one's, reaches the threshold its
rows record), judged by the verdict rule like any claim, on hand-built result roots."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.unit.claims.test_claims_check import write_claims

LENGTHS = (1000, 2000, 4000)
# ruler/average score per seed and length: llama holds to 2000, mistral to 1000 only
SCORES = {
    "llama": [[95.0, 90.0, 50.0], [92.0, 88.0, 40.0], [96.0, 86.0, 60.0]],
    "mistral": [[95.0, 40.0, 30.0], [90.0, 30.0, 20.0], [88.0, 50.0, 10.0]],
}


def ruler_root(
    root: Path,
    scores: dict[str, list[list[float]]],
    threshold: float | list[float] | None = 85.6,
    lengths: tuple[int, ...] = LENGTHS,
) -> Path:
    """Pretrained runs (one per label and seed) with a RULER task row and the average row per
    length, as ``posx eval hf:... --suite ruler`` writes them; ``threshold`` per row (a list:
    one per length; None: rows written before the threshold was recorded)."""
    for label, seeds in scores.items():
        for seed, values in enumerate(seeds):
            run = root / "pretrained" / f"{label}_s{seed}"
            run.mkdir(parents=True)
            ident = {"schema_version": 1, "run": run.name, "encoding": label, "task": "text",
                     "model": "pretrained", "seed": seed, "train_length": 1000}  # fmt: skip
            (run / "run.json").write_text(json.dumps({**ident, "experiment": "ruler_demo"}))
            rows = []
            each = threshold if isinstance(threshold, list) else [threshold] * len(lengths)
            for length, score, limit in zip(lengths, values, each, strict=True):
                key = {**ident, "mode": "generate", "overrides": "", "eval_length": length,
                       "window": length, "stride": length, "status": "ok", "reason": "",
                       "metric": "string_match_all", "samples": 20}  # fmt: skip
                rows.append({**key, "task": "ruler/niah_single_1", "score": score})
                average = {**key, "task": "ruler/average", "score": score}
                if limit is not None:
                    average["threshold"] = limit
                rows.append(average)
            pd.DataFrame(rows).to_csv(run / "eval.csv", index=False)
    return root


def check(cli, tmp_path: Path, claims: dict[str, str], *extra: str) -> tuple[int, dict]:
    write_claims(tmp_path / "conf", "ruler_demo", {k: (v, "") for k, v in claims.items()})
    proc = cli("--config-dir", str(tmp_path / "conf"), "check", str(tmp_path / "results"), "-f",
               "json", *extra)  # fmt: skip
    assert proc.returncode in (0, 1, 3), proc.stdout + proc.stderr
    return proc.returncode, {c["claim"]: c for c in json.loads(proc.stdout)["claims"]}


def test_effective_lengths_are_judged_per_seed(cli, tmp_path):
    ruler_root(tmp_path / "results", SCORES)
    code, got = check(cli, tmp_path, {
        "reaches": "effective_length: llama >= 2000",
        "not_twice": "effective_length: llama >= 4000 on ruler",
        "longer": "effective_length: llama > mistral",
        "between": "effective_length: llama >= 3000",
        "margin": "effective_length: mistral + 1000 >= llama",
    })  # fmt: skip
    assert code == 1
    assert got["reaches"]["verdict"] == "holds" and got["reaches"]["seed_agreement"] == (
        "llama >= 2000: 3/3"
    )
    (llama,) = [m for m in got["reaches"]["measured"] if m["term"] == "llama"]
    assert llama["values"] == {"0": 2000.0, "1": 2000.0, "2": 2000.0}
    assert got["not_twice"]["verdict"] == "fails"
    assert got["longer"]["verdict"] == "holds" and got["longer"]["seed_agreement"] == (
        "llama > mistral: 9/9"
    )
    # each seed passes 2000 and falls below at 4000: 3000 was never evaluated
    assert got["between"]["verdict"] == "inconclusive"
    assert got["between"]["reason"] == (
        "llama seed 0 reaches the threshold up to 2000 and falls below it at 4000: whether its "
        "effective length is >= 3000 depends on lengths not evaluated; evaluate it at 3000"
    )
    assert got["margin"]["verdict"] == "holds"


def test_the_threshold_is_the_one_its_rows_record(cli, tmp_path):
    """Rows evaluated at ruler.threshold=30: every seed of llama holds to 4000 (at 85.6 it
    would be 2000); thresholds that differ between a seed's lengths give no verdict."""
    ruler_root(tmp_path / "results", {"llama": SCORES["llama"]}, threshold=30.0)
    code, got = check(cli, tmp_path, {"long": "effective_length: llama >= 4000"})
    assert code == 0 and got["long"]["verdict"] == "holds", got
    ruler_root(tmp_path / "mixed", {"llama": SCORES["llama"]}, threshold=[85.6, 85.6, 30.0])
    (tmp_path / "results").rename(tmp_path / "old")
    (tmp_path / "mixed").rename(tmp_path / "results")
    code, got = check(cli, tmp_path, {"long": "effective_length: llama >= 4000"})
    assert code == 3 and got["long"]["reason"] == (
        "llama seed 0: its ruler/average rows record thresholds 30, 85.6 (evaluated with "
        "different ruler.threshold); evaluate its lengths again with one"
    )


def test_rows_without_a_threshold_are_judged_at_rulers_and_say_so(cli, tmp_path):
    ruler_root(tmp_path / "results", {"llama": SCORES["llama"]}, threshold=None)
    code, got = check(cli, tmp_path, {"reaches": "effective_length: llama >= 2000"})
    assert code == 0 and got["reaches"]["verdict"] == "holds"
    assert got["reaches"]["notes"][0] == (
        "llama seed 0: its ruler/average rows record no threshold (evaluated before posx "
        "recorded it); judged at RULER's 85.6"
    )


def test_what_the_lengths_cannot_tell_apart_is_inconclusive(cli, tmp_path):
    """Both reach the longest length: 4000 >= 4000 says nothing; one model never evaluated past
    the claim's number: no verdict either; too few seeds: the rule's own ?."""
    high = [[99.0, 99.0, 99.0]] * 3
    ruler_root(tmp_path / "results", {"llama": high, "mistral": high})
    code, got = check(cli, tmp_path, {
        "tie": "effective_length: llama >= mistral",
        "beyond": "effective_length: llama >= 8000",
        "reaches": "effective_length: llama >= 4000",
    })  # fmt: skip
    assert code == 3 and got["reaches"]["verdict"] == "holds"
    assert got["tie"]["reason"] == (
        "llama and mistral reach the threshold at every length evaluated (up to 4000): "
        "evaluate longer lengths to tell them apart"
    )
    assert got["beyond"]["reason"].endswith(
        "was not evaluated past it: whether its effective length is >= 8000 depends on lengths "
        "not evaluated; evaluate it at 8000"
    )


@pytest.mark.parametrize(
    ("statement", "text"),
    [
        ("effective_length: llama >= 2000 at L=2000", "no 'at', 'by', '×r' or '@'"),
        ("effective_length: llama >= 2000 by score", "no 'at', 'by', '×r' or '@'"),
        ("effective_length: llama >= 2000 on copy", "is on ruler, not on 'copy'"),
    ],
)
def test_a_bad_effective_length_statement_is_one_line(cli, tmp_path, statement, text):
    ruler_root(tmp_path / "results", {"llama": SCORES["llama"]})
    write_claims(tmp_path / "conf", "ruler_demo", {"bad": (statement, "")})
    proc = cli("--config-dir", str(tmp_path / "conf"), "check", str(tmp_path / "results"))
    assert proc.returncode == 2 and text in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_length_that_failed_to_evaluate_is_not_read_as_a_low_score(cli, tmp_path):
    """Out of memory at 4000: the effective length is 2000 but whether the model holds at 4000
    is unknown, so '< 4000' is ?, not ✓."""
    root = ruler_root(tmp_path / "results", {"llama": [[99.0, 99.0, 99.0]] * 3})
    for run in (root / "pretrained").iterdir():
        rows = pd.read_csv(run / "eval.csv", keep_default_na=False)
        at = rows["eval_length"] == 4000
        rows.loc[at, "status"], rows.loc[at, "reason"] = "failed", "CUDA out of memory"
        rows.loc[at, "score"] = float("nan")
        rows.to_csv(run / "eval.csv", index=False)
    code, got = check(cli, tmp_path, {"short": "effective_length: llama < 4000"})
    assert code == 3 and got["short"]["reason"] == (
        "llama seed 0 reaches the threshold up to 2000 and has no score at 4000 (its row there "
        "did not evaluate): whether its effective length is < 4000 depends on lengths not "
        "evaluated; evaluate it at 4000"
    )
