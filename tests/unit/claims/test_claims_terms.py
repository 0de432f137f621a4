"""Terms read at their own length (``NAME @1x``, ``NAME @L=N``) and margins (``B + 0.1``): the
context-extension claims "the extended model reaches its base's 1x quality" and "PoSE is
comparable to full-length fine-tuning", parsed, measured and judged through `posx check`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from posx.claims.check import FAILS, HOLDS, INCONCLUSIVE
from posx.claims.find import check_root
from posx.claims.language import ClaimError, Term, parse_statement
from tests.unit.claims.test_claims_check import write_claims
from tests.unit.report.report_trees import make_seed_tree

VALUES = {  # bpb at L=16 (1x), 32, 64; three seeds
    "base": [[2.00, 3.0, 4.0], [2.02, 3.1, 4.1], [2.01, 3.2, 4.2]],
    "ext": [[2.10, 2.0, 1.98], [2.12, 2.01, 1.99], [2.11, 2.02, 1.97]],
    "near": [[2.10, 2.05, 2.04], [2.12, 2.06, 2.05], [2.11, 2.07, 2.03]],
}
CLAIMS = {
    "reaches_base_1x": ("ext <= base @1x at 4x by bpb", HOLDS),
    "reaches_base_abs": ("ext <= base @L=16 at L=64 by bpb", HOLDS),
    "not_without_margin": ("near <= ext at 4x by bpb", FAILS),
    "comparable": ("near <= ext + 0.1 at 4x by bpb", HOLDS),
    "margin_too_small": ("near <= ext + 0.01 at 4x by bpb", FAILS),
    "negative_margin": ("ext <= near - 0.03 at 4x by bpb", HOLDS),
    "own_length_absent": ("ext <= base @L=999 at 4x by bpb", INCONCLUSIVE),
}


def test_terms_parse_with_their_own_length_and_margin():
    st = parse_statement("rope+yarn×4+ft@256 <= rope ×r @1x + 0.1 at L=256 by bpb")
    assert st.terms[0] == Term("rope+yarn×4+ft@256")
    assert st.terms[1] == Term("rope", ratio=True, factor=1, offset=0.1)
    assert str(st.terms[1]) == "rope ×r @1x + 0.1" and st.terms[1].key == "rope ×r @1x"
    assert parse_statement("a <= b @L=64 - 2 at 4x").terms[1] == Term("b", length=64, offset=-2.0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a <= b + at 4x", "'+' after b needs a number"),
        ("a <= b @3 at 4x", "'@3' after b: give a multiple of the training length"),
        ("mrr: a > b @1x", "no 'at', 'on', '×r', '@' or margin"),
        ("mrr: a > b + 1", "no 'at', 'on', '×r', '@' or margin"),
    ],
)
def test_bad_own_lengths_and_margins_are_one_line(text: str, message: str):
    with pytest.raises(ClaimError) as err:
        parse_statement(text)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.fixture
def verdicts(tmp_path: Path):
    make_seed_tree(tmp_path / "results", VALUES, experiment="ext_claims")
    write_claims(tmp_path / "conf", "ext_claims", CLAIMS)
    return {v.claim.id: v for v in check_root(tmp_path / "results", [tmp_path / "conf"]).verdicts}


@pytest.mark.parametrize("ident", list(CLAIMS))
def test_own_lengths_and_margins_are_judged(verdicts, ident: str):
    verdict = verdicts[ident]
    assert verdict.verdict == CLAIMS[ident][1], (verdict.reason, verdict.statistic())


def test_a_term_at_its_own_length_reads_that_lengths_values(verdicts):
    measured = {m.term: m for m in verdicts["reaches_base_1x"].measured}
    assert measured["base @1x"].mean == pytest.approx(2.01)  # base at L=16, not at 4x
    assert measured["ext"].mean == pytest.approx(1.98)
    assert "L=999" in verdicts["own_length_absent"].reason


def test_posx_check_judges_margins_and_own_lengths_through_the_cli(tmp_path: Path):
    make_seed_tree(tmp_path / "results", VALUES, experiment="ext_claims")
    claims = {k: CLAIMS[k] for k in ("reaches_base_1x", "comparable")}
    write_claims(tmp_path / "conf", "ext_claims", claims)
    proc = subprocess.run(
        [sys.executable, "-m", "posx", "--config-dir", str(tmp_path / "conf"), "check",
         str(tmp_path / "results"), "--format", "json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = {v["claim"]: v for v in json.loads(proc.stdout)["claims"]}
    assert {v["verdict"] for v in out.values()} == {"holds"}, out
    assert "base @1x" in json.dumps(out["reaches_base_1x"]["measured"])
