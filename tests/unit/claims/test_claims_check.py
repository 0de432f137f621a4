"""Claims checked on synthetic result trees with several seeds: ✓, ✗ and ? by the documented
rule (seed means plus seed-level agreement), ratios, numbers, MRR rankings, missing values."""

from __future__ import annotations

from pathlib import Path

import pytest

from posx.claims.check import FAILS, HOLDS, INCONCLUSIVE, exit_code
from posx.claims.find import check_root, run_experiment
from posx.errors import ConfigError
from tests.unit.report.report_trees import make_seed_tree

TEXT = {  # bpb at 1x, 2x, 4x (train 16: L=16, 32, 64), three seeds each
    "sinusoidal": [[2.0, 3.0, 4.0], [2.1, 3.1, 4.2], [2.05, 3.2, 4.1]],
    "rope": [[2.0, 2.5, 3.0], [2.02, 2.6, 3.1], [2.01, 2.55, 3.05]],
    "alibi": [[2.0, 2.0, 2.01], [2.1, 2.1, 2.1], [2.05, 2.04, 2.06]],
    "learned": [[1.9, None, None], [1.9, None, None], [1.9, None, None]],
    "rope+yarn×4": [[2.1, 2.2, 2.3], [2.1, 2.2, 2.3], [2.1, 2.2, 2.3]],
}
CLAIMS = {
    "ordering": ("sinusoidal > rope > alibi at 4x by bpb", HOLDS),
    "flat": ("alibi ×r <= 1.02 at 4x", HOLDS),
    "below": ("rope < 3.5 at 4x", HOLDS),
    "variant": ("rope+yarnx4 < rope at 4x", HOLDS),
    "wrong": ("alibi > rope at 4x", FAILS),
    "split": ("sinusoidal <= 2.05 at 1x", INCONCLUSIVE),
    "absent": ("nosuch < alibi at 4x", INCONCLUSIVE),
    "unsupported": ("learned < alibi at 4x", INCONCLUSIVE),
}


def write_claims(config_dir: Path, name: str, claims: dict[str, tuple[str, str]]) -> None:
    """A user config dir with the preset NAME and its claims file."""
    (config_dir / "experiment").mkdir(parents=True, exist_ok=True)
    (config_dir / "claims").mkdir(exist_ok=True)
    (config_dir / "experiment" / f"{name}.yaml").write_text(
        f"# @package _global_\nexperiment_name: {name}\n"
    )
    lines = ["paper: Someone et al. 2024", "claims:"]
    for ident, (statement, _) in claims.items():
        lines += [f"  - id: {ident}", f"    statement: '{statement}'", "    table: Table 1",
                  "    published: {alibi: 18.41, rope: [20.07, 31.58]}"]  # fmt: skip
    (config_dir / "claims" / f"{name}.yaml").write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory):
    """The verdicts of CLAIMS on one seed tree, checked once for the module (tests only read
    them)."""
    tmp_path = tmp_path_factory.mktemp("checked")
    make_seed_tree(tmp_path / "results", TEXT, experiment="demo_claims")
    write_claims(tmp_path / "conf", "demo_claims", CLAIMS)
    return {v.claim.id: v for v in check_root(tmp_path / "results", [tmp_path / "conf"]).verdicts}


@pytest.mark.parametrize("ident", list(CLAIMS))
def test_each_claim_gets_its_verdict(checked, ident: str):
    verdict = checked[ident]
    assert verdict.verdict == CLAIMS[ident][1], (verdict.reason, verdict.statistic())


def test_a_verdict_carries_values_seeds_and_the_seed_statistic(checked):
    v = checked["ordering"]
    assert v.seeds == 3 and v.metric == "bpb" and "L=64" in v.where
    assert [m.term for m in v.measured] == ["sinusoidal", "rope", "alibi"]
    assert v.measured[0].mean == pytest.approx(4.1)
    assert v.statistic().endswith("9/9")  # every pair of seeds agrees on every link
    assert checked["flat"].measured[0].term == "alibi ×r"
    assert checked["flat"].measured[0].mean == pytest.approx((2.01 / 2 + 1 + 2.06 / 2.05) / 3)


def test_a_failing_claim_says_which_link_and_how_often_its_opposite_holds(checked):
    v = checked["wrong"]
    assert v.reason == "alibi > rope fails on the mean"
    assert v.statistic() == "alibi <= rope: 9/9"


def test_inconclusive_claims_say_why(checked):
    assert "seeds split: sinusoidal <= 2.05 holds in 2 of 3" in checked["split"].reason
    assert "no rows of nosuch" in checked["absent"].reason
    assert "rope+yarn×4" in checked["absent"].reason  # the labels there are
    assert "learned at 4x: unsupported too long" in checked["unsupported"].reason


def test_too_few_seeds_is_inconclusive_even_when_every_seed_agrees(tmp_path: Path):
    two = {k: v[:2] for k, v in TEXT.items()}
    make_seed_tree(tmp_path / "results", two, experiment="demo_claims")
    write_claims(tmp_path / "conf", "demo_claims", {"ordering": CLAIMS["ordering"]})
    (v,) = check_root(tmp_path / "results", [tmp_path / "conf"]).verdicts
    assert v.verdict == INCONCLUSIVE and "has 2 seed(s); a verdict needs 3" in v.reason
    assert v.statistic().endswith("4/4")
    (v,) = check_root(tmp_path / "results", [tmp_path / "conf"], min_seeds=2).verdicts
    assert v.verdict == HOLDS


SYNTHETIC = {  # exact match at 1x and 2x (train 16), per task; ranked past training
    "copy": {"nope": [0.9, 0.8, 0.85], "alibi": [0.5, 0.4, 0.45], "rope": [0.1, 0.2, 0.15]},
    "reverse": {"nope": [0.7, 0.75, 0.72], "alibi": [0.5, 0.5, 0.45], "rope": [0.3, 0.2, 0.25]},
}


def test_an_mrr_ranking_across_tasks(tmp_path: Path):
    for task, encodings in SYNTHETIC.items():
        values = {e: [[1.0, x] for x in seeds] for e, seeds in encodings.items()}
        make_seed_tree(tmp_path / "results", values, "syn", task=task, lengths=(16, 32))
    claims = {"mrr": ("mrr: nope > alibi > rope", HOLDS), "wrong": ("mrr: rope > nope", FAILS),
              "copy": ("nope >= alibi at 2x on copy", HOLDS),
              "which": ("nope >= alibi at 2x", INCONCLUSIVE)}  # fmt: skip
    write_claims(tmp_path / "conf", "syn", claims)
    verdicts = {
        v.claim.id: v for v in check_root(tmp_path / "results", [tmp_path / "conf"]).verdicts
    }
    for ident, (_, expected) in claims.items():
        assert verdicts[ident].verdict == expected, verdicts[ident].reason
    mrr = {m.term: m.mean for m in verdicts["mrr"].measured}
    assert mrr == pytest.approx({"nope": 1.0, "alibi": 0.5, "rope": 1 / 3})
    assert verdicts["mrr"].statistic().endswith("3/3")  # one ranking per seed
    assert verdicts["copy"].metric == "exact_match"
    assert "the claim names none: pass --task copy" in verdicts["which"].reason


def test_runs_of_other_presets_and_unnamed_runs_are_left_aside(tmp_path: Path):
    make_seed_tree(tmp_path / "results", TEXT, experiment="demo_claims")
    make_seed_tree(tmp_path / "results" / "other", {"alibi": TEXT["rope"]}, experiment="")
    write_claims(tmp_path / "conf", "demo_claims", {"wrong": CLAIMS["wrong"]})
    got = check_root(tmp_path / "results", [tmp_path / "conf"])
    assert [v.verdict for v in got.verdicts] == [FAILS]
    assert any("3 run(s) record no experiment" in n for n in got.notes)
    # --experiment NAME checks the runs that record NAME; the unnamed runs stay aside
    (v,) = check_root(tmp_path / "results", [tmp_path / "conf"], experiment="demo_claims").verdicts
    assert v.verdict == FAILS


def test_no_preset_with_claims_under_the_root_is_an_error(tmp_path: Path):
    make_seed_tree(tmp_path / "results", TEXT, experiment="")
    with pytest.raises(ConfigError, match="no run under .* records an experiment with claims"):
        check_root(tmp_path / "results", [])
    with pytest.raises(ConfigError, match="no claims for experiment 'nosuch'; presets with"):
        check_root(tmp_path / "results", [], experiment="nosuch")


def test_a_run_names_its_preset_safely(tmp_path: Path):
    make_seed_tree(tmp_path, {"alibi": [[1.0, 1.0, 1.0]]}, experiment="../../etc/passwd")
    assert run_experiment(tmp_path / "runs" / "text_alibi_s0") == ""


def test_exit_codes_follow_the_verdicts(checked):
    assert exit_code([checked["ordering"], checked["flat"]]) == 0
    assert exit_code([checked["ordering"], checked["split"]]) == 3
    assert exit_code([checked["wrong"], checked["split"]]) == 1


def test_values_at_zero_and_rankings_without_ranks_are_inconclusive(tmp_path: Path):
    """Every run learned (1.0 at 1x) and none extrapolates (0.0 at 2x), as in nope_synthetic at
    CPU scale: `nope >= rope` is true of two zeros but says nothing, and no task carries a rank,
    so an MRR order has no values. Both are ?, not ✓ and not ✗ (the old code gave ✓ and ✗)."""
    for task in ("copy", "reverse"):
        values = {e: [[1.0, 0.0]] * 3 for e in ("nope", "rope", "alibi")}
        make_seed_tree(tmp_path / "results", values, "syn", task=task, lengths=(16, 32))
    claims = {"zeros": ("nope >= rope at 2x on copy", INCONCLUSIVE),
              "mrr": ("mrr: nope > rope", INCONCLUSIVE)}  # fmt: skip
    write_claims(tmp_path / "conf", "syn", claims)
    verdicts = {
        v.claim.id: v for v in check_root(tmp_path / "results", [tmp_path / "conf"]).verdicts
    }
    assert verdicts["zeros"].verdict == INCONCLUSIVE, verdicts["zeros"].reason
    assert "at chance" in verdicts["zeros"].reason
    assert verdicts["mrr"].verdict == INCONCLUSIVE, verdicts["mrr"].reason
    assert "no MRR" in verdicts["mrr"].reason


def test_runs_evaluated_before_their_last_step_are_left_out_unless_asked(tmp_path: Path, cli):
    import pandas as pd

    make_seed_tree(tmp_path / "results", TEXT, experiment="demo_claims")
    write_claims(tmp_path / "conf", "demo_claims", {"wrong": CLAIMS["wrong"]})
    for table in (tmp_path / "results").rglob("eval.csv"):
        rows = pd.read_csv(table)
        if set(rows["encoding"]) == {"alibi"}:  # every alibi seed stopped at step 5 of 10
            rows.assign(steps_done=5, steps_planned=10).to_csv(table, index=False)
    default = check_root(tmp_path / "results", [tmp_path / "conf"])
    assert default.verdicts[0].verdict == INCONCLUSIVE  # no finished alibi run to judge
    assert any("left out 3 run(s) evaluated before their last step" in n for n in default.notes)
    asked = check_root(tmp_path / "results", [tmp_path / "conf"], partial=True)
    assert asked.verdicts[0].verdict == FAILS and not asked.notes
    # through the command a user types: exit 3 (inconclusive) with the note, 1 with --partial
    base = ("--config-dir", str(tmp_path / "conf"), "check", str(tmp_path / "results"), "-f", "md")
    shown = cli(*base)
    assert shown.returncode == 3 and "evaluated before their last step" in shown.stdout
    assert cli(*base, "--partial").returncode == 1


def test_a_fractional_factor_reads_the_length_it_names(tmp_path: Path):
    """``at 1.5x`` is 12 for runs trained at 8 (issue 45's claims at 1.5x the training digits);
    at a training length it does not divide it says so instead of finding no rows."""
    values = {  # exact match at 8, 12, 16 digits
        "abacus": [[1.0, 0.95, 0.6], [1.0, 0.92, 0.55], [1.0, 0.97, 0.7]],
        "rope": [[1.0, 0.02, 0.0], [1.0, 0.05, 0.0], [1.0, 0.0, 0.0]],
    }
    make_seed_tree(tmp_path / "results", values, task="arithmetic", train_length=8,
                   lengths=(8, 12, 16))  # fmt: skip
    claims = {
        "at_1_5x": ("abacus >= 0.9 at 1.5x by exact_match", HOLDS),
        "rope_1_5x": ("rope <= 0.1 at 1.5x by exact_match", HOLDS),
        "own_factor": ("abacus @1.5x > rope @1.5x at 2x by exact_match", HOLDS),
        "too_high": ("abacus >= 0.9 at 2x by exact_match", FAILS),
    }
    write_claims(tmp_path / "conf", "demo_claims", claims)
    verdicts = {
        v.claim.id: v for v in check_root(tmp_path / "results", [tmp_path / "conf"]).verdicts
    }
    for ident, (_, expected) in claims.items():
        assert verdicts[ident].verdict == expected, (ident, verdicts[ident].reason)
    assert verdicts["at_1_5x"].claim.statement.where() == "at 1.5x"

    odd = tmp_path / "odd"
    make_seed_tree(odd / "results", values, task="arithmetic", train_length=5,
                   lengths=(5, 8, 10))  # fmt: skip
    write_claims(odd / "conf", "demo_claims", {"at_1_5x": claims["at_1_5x"]})
    (verdict,) = check_root(odd / "results", [odd / "conf"]).verdicts
    assert verdict.verdict == INCONCLUSIVE
    assert "1.5 x its training length 5 is not a whole length" in verdict.reason


def test_each_shipped_preset_knows_the_tasks_it_trains():
    """From its configs/experiment file (defaults, sweep, arms): what `posx check` judges a
    preset's task-less claims on, beside a run of another task in the same root (issue 57)."""
    from posx.claims.preset import preset_tasks

    assert preset_tasks("context_extension") == ["text"]
    assert preset_tasks("alibi_table2_bpe") == ["text_bpe"]
    assert preset_tasks("nope_synthetic") == ["copy", "parity_scratchpad", "reverse"]
    assert preset_tasks("arithmetic") == ["arithmetic", "arithmetic_hints"]  # through its arms
    assert preset_tasks("nosuch") == []
