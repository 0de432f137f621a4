"""`posx check ROOT` and `posx report --claims` through the real CLI: the verdict table, the
exit status (0 all hold, 1 some fail, 3 some inconclusive, 2 bad input) and one-line errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.claims.test_claims_check import TEXT, write_claims
from tests.unit.report.report_trees import make_seed_tree

LEGACY = Path(__file__).resolve().parent.parent / "fixtures" / "legacy" / "results"


def posx(*args: str, columns: int = 250) -> subprocess.CompletedProcess:
    env = {**os.environ, "POSX_DEBUG": "0", "COLUMNS": str(columns)}
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


def test_check_fits_an_80_column_terminal(tmp_path: Path):
    """Issue 35, item 6, as reported: `COLUMNS=80 posx check` on the legacy runs split each
    claim id over three lines (`rope_sca/ling/yar`). Now one block per claim, every line fits."""
    root = Path(shutil.copytree(LEGACY, tmp_path / "results"))
    proc = posx("check", str(root), columns=80)
    assert proc.returncode == 3, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80, proc.stdout
    for ident in ("yarn_helps_4x", "yarn_beats_pi_4x", "ntk_beats_pi_4x", "yarn_helps_8x"):
        assert sum(f"? inconclusive  rope_scaling/{ident}" in x for x in lines) == 1, ident
    assert any(x.strip().startswith("why ") and "1 seed(s)" in x for x in lines)
    wide = posx("check", str(root), columns=250)
    assert "┃" in wide.stdout and "seed agreement" in wide.stdout


def test_check_format_json_is_plain_json_on_stdout(cli, tree):
    """Issue 35, item 9: `posx check -f json` prints one object per claim and nothing else on
    stdout; the exit status and the summary on stderr are those of the table."""
    claims = {"a": ("sinusoidal > rope at 4x", ""), "b": ("alibi > rope at 4x", ""),
              "c": ("sinusoidal <= 2.05 at 1x", "")}  # fmt: skip
    write_claims(tree / "conf", "demo_claims", claims)
    out = cli("--config-dir", str(tree / "conf"), "check", str(tree / "results"), "-f", "json")
    assert out.returncode == 1, out.stderr
    assert out.stderr.strip() == "posx: 1 of 3 claims hold, 1 fail, 1 inconclusive"
    got = json.loads(out.stdout)
    assert [(c["id"], c["verdict"]) for c in got["claims"]] == [
        ("demo_claims/a", "holds"), ("demo_claims/b", "fails"), ("demo_claims/c", "inconclusive")
    ]  # fmt: skip
    for claim in got["claims"]:
        assert {"statement", "measured", "seeds", "seed_agreement", "reason"} <= set(claim)
    assert got["claims"][1]["seed_agreement"] == "alibi <= rope: 9/9"
    assert got["claims"][2]["reason"].startswith("seeds split")


def test_check_rejects_an_unknown_format_in_one_line(cli, tree):
    write_claims(tree / "conf", "demo_claims", {"a": ("sinusoidal > rope at 4x", "")})
    out = cli("--config-dir", str(tree / "conf"), "check", str(tree / "results"), "-f", "xml")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == "posx: error: unknown --format 'xml'; choose from rich, md, json"


@pytest.mark.slow
def test_report_claims_as_json(tree):
    write_claims(tree / "conf", "demo_claims", {"b": ("alibi > rope at 4x", "")})
    proc = posx("--config-dir", str(tree / "conf"), "report", "--root", str(tree / "results"),
                "--claims", "-f", "json")  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    got = json.loads(proc.stdout)
    assert [c["verdict"] for c in got["claims"]] == ["fails"] and got["cells"]


def test_experiment_checks_its_own_runs_on_a_mixed_root(tmp_path: Path):
    """Issue 35.5: on a root that also holds another preset's runs and runs that record no
    preset (of another task), `--experiment NAME` took the unnamed runs in, so every claim
    said "runs of several tasks (copy, text); name one with 'on TASK'" and was inconclusive."""
    results = tmp_path / "results"
    make_seed_tree(results, TEXT, experiment="demo_claims")
    other = {"rope": [[0.9, 0.5, 0.2]] * 3, "alibi": [[0.9, 0.6, 0.4]] * 3}
    make_seed_tree(results / "quick", other, experiment="", task="copy")
    make_seed_tree(results / "theirs", other, experiment="other_claims", task="copy")
    write_claims(tmp_path / "conf", "demo_claims", {"a": ("sinusoidal > rope > alibi at 4x", "")})
    write_claims(tmp_path / "conf", "other_claims", {"b": ("alibi > rope at 4x", "")})
    conf = ("--config-dir", str(tmp_path / "conf"))
    proc = posx(*conf, "check", str(results), "--experiment", "demo_claims", "-f", "md")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| ✓ holds | demo_claims/a |" in proc.stdout and "other_claims" not in proc.stdout
    assert "on TASK" not in proc.stdout
    every = posx(*conf, "check", str(results), "-f", "md")
    assert every.returncode == 0, every.stdout + every.stderr
    assert "demo_claims/a" in every.stdout and "other_claims/b" in every.stdout
    assert "6 run(s) record no experiment and are not checked" in every.stdout


def test_a_claim_without_on_task_over_several_tasks_is_explained(tmp_path: Path):
    """Issue 35.5: "name one with 'on TASK'" said nothing of where: a note names the preset's
    tasks, the claims that name none and the file to add 'on TASK' to."""
    results = tmp_path / "results"
    make_seed_tree(results, TEXT, experiment="demo_claims")
    make_seed_tree(results, {"rope": [[0.9, 0.5, 0.2]] * 3}, experiment="demo_claims", task="copy")
    claims = {"a": ("sinusoidal > rope at 4x", ""), "b": ("alibi < rope at 4x on text", "")}
    write_claims(tmp_path / "conf", "demo_claims", claims)
    proc = posx("--config-dir", str(tmp_path / "conf"), "check", str(results), "-f", "md")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    file = tmp_path / "conf" / "claims" / "demo_claims.yaml"
    assert (
        "demo_claims's runs are of 2 tasks (copy, text) and its claim(s) a name no task, so they "
        "cannot pick one: pass --task copy (or --where KEY=VALUE) to judge one task's runs, or "
        f"add 'on TASK' to their statements in {file}"
    ) in proc.stdout.replace("\n", " ")
    picked = posx("--config-dir", str(tmp_path / "conf"), "check", str(results), "-f", "md",
                  "--task", "text")  # fmt: skip
    assert picked.returncode == 0, picked.stdout + picked.stderr


# Issue 57, item 1: the preset trains text; one `posx train experiment=... task=copy` run landed
# in the same root and turned every claim into ?.
MIXED = {"ordering": ("sinusoidal > rope > alibi at 4x by bpb", ""),
         "flat": ("alibi ×r <= 1.02 at 4x", ""), "wrong": ("alibi > rope at 4x", "")}  # fmt: skip


def _mixed_root(tmp_path: Path) -> tuple[str, ...]:
    """demo_claims (a preset that trains text) with three seeds of text runs and one copy run
    that records the preset; the arguments of ``posx check`` on it."""
    make_seed_tree(tmp_path / "results", TEXT, experiment="demo_claims")
    make_seed_tree(tmp_path / "results", {"rope": [[0.9, 0.5, 0.2]]}, experiment="demo_claims",
                   task="copy")  # fmt: skip
    write_claims(tmp_path / "conf", "demo_claims", MIXED)
    (tmp_path / "conf" / "experiment" / "demo_claims.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /task: text\nexperiment_name: demo_claims\n"
    )
    return ("--config-dir", str(tmp_path / "conf"), "check", str(tmp_path / "results"))


def test_a_run_of_another_task_leaves_the_presets_verdicts_alone(cli, tmp_path: Path):
    """2 of 3 held without the copy run, and 0 of 3 (all ?, "runs of several tasks") with it;
    now the preset's claims judge the task it trains, the copy run is left aside with a note,
    and nothing tells the user to edit a claims file."""
    args = _mixed_root(tmp_path)
    proc = cli(*args, "-f", "md")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "2 of 3 claims hold, 1 fail, 0 inconclusive" in proc.stdout
    assert (
        "left out 1 run(s) of demo_claims on task(s) copy: the preset trains text; --task copy "
        "checks its claims on them instead"
    ) in proc.stdout
    assert "several tasks" not in proc.stdout and "claims/demo_claims.yaml" not in proc.stdout
    # the filters of posx report pick the same runs, with the same syntax
    for chosen in (("--task", "text"), ("--where", "task=text"), ("-t", "text")):
        got = cli(*args, "-f", "md", *chosen)
        assert got.returncode == 1 and "2 of 3 claims hold" in got.stdout, (chosen, got.stdout)
        assert "left out 1 run(s)" not in got.stdout
    # asked for, the copy run is judged (its rows have none of the claims' labels: ?)
    copy = cli(*args, "-f", "md", "--task", "copy")
    assert copy.returncode == 3 and "0 of 3 claims hold, 0 fail, 3 inconclusive" in copy.stdout
    bad = cli(*args, "--task", "nosuch")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip() == (
        "posx: error: no results for --task 'nosuch'; available: copy, text"
    )
    bad = cli(*args, "--where", "nosuch=1")
    assert bad.returncode == 2 and "unknown --where key 'nosuch'" in bad.stderr
    # posx report --claims judges the runs of its own --task
    report = (*args[:2], "report", "--root", args[3], "--claims", "-f", "md")
    shown = cli(*report, "--task", "copy")
    assert shown.returncode == 3 and "0 of 3 claims hold, 0 fail, 3 inconclusive" in shown.stdout
    assert cli(*report).returncode == 1
    # a root with only the other task's runs says which --task judges them
    shutil.rmtree(tmp_path / "results")
    make_seed_tree(tmp_path / "results", {"rope": [[0.9, 0.5, 0.2]]}, experiment="demo_claims",
                   task="copy")  # fmt: skip
    (verdict, *_) = json.loads(cli(*args, "-f", "json").stdout)["claims"]
    assert verdict["reason"] == (
        "no runs of the task(s) the preset trains (text), only of copy: --task copy checks its "
        "claims on those"
    )
