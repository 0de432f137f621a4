"""`posx check ROOT` and `posx report --claims` through the real CLI: the verdict table, the
exit status (0 all hold, 1 some fail, 3 some inconclusive, 2 bad input) and one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.claims.test_claims_check import TEXT, write_claims
from tests.unit.report.report_trees import make_seed_tree


def posx(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "POSX_DEBUG": "0", "COLUMNS": "250"}
    return subprocess.run([sys.executable, "-m", "posx", *args], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    make_seed_tree(tmp_path / "results", TEXT, experiment="demo_claims")
    return tmp_path


@pytest.mark.parametrize(
    ("claims", "code", "summary"),
    [
        ({"a": ("sinusoidal > rope > alibi at 4x", "")}, 0, ""),
        ({"a": ("sinusoidal > rope at 4x", ""), "b": ("alibi > rope at 4x", "")}, 1,
         "posx: 1 of 2 claims hold, 1 fail, 0 inconclusive"),
        ({"a": ("sinusoidal > rope at 4x", ""), "b": ("sinusoidal <= 2.05 at 1x", "")}, 3,
         "posx: 1 of 2 claims hold, 0 fail, 1 inconclusive"),
    ],
)  # fmt: skip
@pytest.mark.slow
def test_check_exit_status_says_whether_every_claim_holds(tree, claims, code, summary):
    write_claims(tree / "conf", "demo_claims", claims)
    proc = posx("--config-dir", str(tree / "conf"), "check", str(tree / "results"))
    assert proc.returncode == code, proc.stderr
    assert "demo_claims/a" in proc.stdout and "✓ holds" in proc.stdout
    assert proc.stderr.strip() == summary
    md = posx("--config-dir", str(tree / "conf"), "check", str(tree / "results"), "-f", "md")
    assert md.returncode == code and "| ✓ holds | demo_claims/a |" in md.stdout


@pytest.mark.slow
def test_report_with_claims_shows_them_in_html_and_exits_like_check(tree):
    write_claims(tree / "conf", "demo_claims", {"b": ("alibi > rope at 4x", "")})
    out = tree / "report.html"
    proc = posx("--config-dir", str(tree / "conf"), "report", "--root", str(tree / "results"),
                "--claims", "-o", str(out))  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    page = out.read_text()
    assert "Claims: 0 of 1 claims hold, 1 fail" in page and "✗ fails" in page
    assert "alibi &lt;= rope: 9/9" in page  # the seed-level statistic
    plain = posx("report", "--root", str(tree / "results"))
    assert plain.returncode == 0 and "Claims" not in plain.stdout


def test_a_bad_claims_file_is_one_line_naming_it_exit_2(tree):
    write_claims(tree / "conf", "demo_claims", {"a": ("alibi > > rope at 4x", "")})
    proc = posx("--config-dir", str(tree / "conf"), "check", str(tree / "results"))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("posx: error: ") and "demo_claims.yaml: claim 'a'" in lines[0]


def test_no_preset_with_claims_is_exit_2(tree):
    proc = posx("check", str(tree / "results"))
    assert proc.returncode == 2
    assert "records an experiment with claims" in proc.stderr


def test_check_reads_the_reports_numbers_and_guards_issue_30(tmp_path: Path):
    """Issue 30: on parity (chance 0.5) `rope ×r >= 0.45 at 4x` read the raw ×r (≈0.6, ✓)
    where the report shows ×0.20; on copy with both at 0, `rope ×r >= alibi ×r at 4x` was ✓
    9/9. Through `posx check`: ✗ with the report's ×r, and ? at chance; exit 1 (one fails)."""
    from tests.unit.claims.test_claims_report_cells import COPY_ZERO, PARITY, record_chance

    results = tmp_path / "results"
    make_seed_tree(results, PARITY, "syn", task="parity")
    make_seed_tree(results, COPY_ZERO, "syn", task="copy")
    record_chance(results, {"parity": 0.5, "copy": 0.0})
    claims = {"keeps": ("rope ×r >= 0.45 at 4x on parity", ""),
              "zeros": ("rope ×r >= alibi ×r at 4x on copy", "")}  # fmt: skip
    write_claims(tmp_path / "conf", "syn", claims)
    proc = posx("--config-dir", str(tmp_path / "conf"), "check", str(results), "-f", "md")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = {line.split("|")[2].strip(): line for line in proc.stdout.splitlines()
            if line.startswith("| ")}  # fmt: skip
    assert "✗ fails" in rows["syn/keeps"] and "rope ×r 0.200 ± 0.020" in rows["syn/keeps"]
    assert "? inconclusive" in rows["syn/zeros"] and "at chance" in rows["syn/zeros"]
    assert proc.stderr.strip() == "posx: 0 of 2 claims hold, 1 fail, 1 inconclusive"
