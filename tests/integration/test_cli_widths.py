"""Tables at any width (issue 48): at 60, 80, 120 and 200 columns no number that ``posx
report``, ``posx runs`` or ``posx check`` prints is cut; labels fold, and the length columns
split into groups where they do not fit. Through the command a user types, on runs written
directly (long labels, many lengths)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from posx.cli._app import console

WIDTHS = [60, 80, 120, 200]
LENGTHS = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
# labels as posx writes them, and longer: a position strategy, a scaling, a fine-tuning
LABELS = {
    "rope": 2.0,
    "alibi": 2.1,
    "rope+randomized+yarn×4+ft@1024": 2.2,
    "sinusoidal+coupling+linear×16+ft@4096+pose": 2.3,
}


def wide_tree(root: Path, unit: str = "tokens") -> dict[str, list[float]]:
    """Two seeds of each label of :data:`LABELS` on copy, evaluated at :data:`LENGTHS` (the
    longest unsupported for the first label); returns each label's means by length."""
    means = {}
    for i, (label, base) in enumerate(LABELS.items()):
        means[label] = []
        for seed in (0, 1):
            run = root / "runs" / f"copy_{i}_s{seed}"
            run.mkdir(parents=True)
            ident = {"schema_version": 1, "run": run.name, "encoding": label, "task": "copy",
                     "model": "tiny", "seed": seed, "train_length": 16, "status": "trained",
                     "steps": 30}  # fmt: skip
            (run / "run.json").write_text(json.dumps(ident))
            rows = []
            for k, length in enumerate(LENGTHS):
                ok = not (i == 0 and length == LENGTHS[-1])
                loss = base * (1 + 0.123456 * k) + 0.01 * seed
                rows.append({**ident, "mode": "full", "overrides": "", "eval_length": length,
                             "window": length, "stride": length, "length_unit": unit,
                             "status": "ok" if ok else "unsupported",
                             "reason": "" if ok else "learned table ends at 4096",
                             "loss": loss if ok else math.nan})  # fmt: skip
            pd.DataFrame(rows).to_csv(run / "eval.csv", index=False)
            pd.DataFrame({"step": [10, 30], "loss": [3.0, 2.0]}).to_csv(run / "metrics.csv",
                                                                        index=False)  # fmt: skip
    return means


NUMBER = re.compile(r"\d+\.\d+|×\d+\.\d+|L=\d+")


def _cut(text: str) -> list[str]:
    """Words of ``text`` that a terminal cut: ending in ``…`` after a digit, a dot or ``L=``."""
    return re.findall(r"\S*[\d.=×]…", text)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("wide")
    wide_tree(root)
    return root


@pytest.mark.parametrize("width", WIDTHS)
def test_report_never_cuts_a_number(cli, monkeypatch, tree, width):
    monkeypatch.setattr(console, "width", width)
    out = cli("report", "--root", str(tree), "--metric", "loss")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert max(len(line) for line in lines) <= width
    assert _cut(out.stdout) == [], _cut(out.stdout)
    text = out.stdout
    for length in LENGTHS:  # every length's header, whole, in some part
        assert re.search(rf"\bL={length}\b", text), length
    # every mean, whole (2.000 is rope at 16; 2.347 alibi at 1024 ...)
    for label, base in LABELS.items():
        for k in range(len(LENGTHS) - (label == "rope")):
            mean = base * (1 + 0.123456 * k) + 0.005
            assert f"{mean:.3f} ±" in text, (label, LENGTHS[k], f"{mean:.3f}")
    assert "unsupported [1]" in text
    # the longest label, whole, once its folded lines are joined back
    firsts = "".join(line.split("│")[1].strip() for line in lines if line.startswith("│"))
    assert "sinusoidal+coupling+linear×16+ft@4096+pose" in firsts
    parts = re.findall(r"^\((\d+) of (\d+): ", text, re.M)
    total = int(parts[0][1]) if parts else 1
    assert [int(k) for k, _ in parts] == (list(range(1, total + 1)) if total > 1 else [])
    assert total <= {60: 10, 80: 5, 120: 3, 200: 2}[width]  # as many columns as fit


def test_report_legend_names_digit_columns_only_where_there_are_some(cli, monkeypatch, tree,
                                                                       tmp_path):  # fmt: skip
    monkeypatch.setattr(console, "width", 200)
    tokens = " ".join(cli("report", "--root", str(tree), "--metric", "loss").stdout.split())
    assert "L = eval length in tokens" in tokens and "digits" not in tokens
    wide_tree(tmp_path, unit="digits")
    digits = " ".join(cli("report", "--root", str(tmp_path), "--metric", "loss").stdout.split())
    assert "a column named N digits: operands of up to N digits" in digits
    assert "L = eval length in tokens" not in digits and "16 digits" in digits


@pytest.mark.parametrize("width", WIDTHS)
def test_runs_fit_the_width_and_show_every_value(cli, monkeypatch, tree, width):
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.setattr(console, "width", width)
    monkeypatch.chdir(tree.parent)  # a short root, as typed: each path is the root's + the run's
    out = cli("runs", "--root", tree.name)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert max(len(line) for line in lines) <= width
    assert _cut(out.stdout) == []
    text = " ".join(out.stdout.split())
    for i in range(len(LABELS)):
        for seed in (0, 1):
            assert f"{tree.name}/runs/copy_{i}_s{seed}" in text
    for label in LABELS:  # a label folds only where it is wider than a line
        assert label in text or width < len(label) + 4, label
    # every evaluated length, the list whole (41 characters fit a line at 60)
    assert text.count(",".join(map(str, LENGTHS))) == 2 * (len(LABELS) - 1)
    assert text.count("30/30") == 2 * len(LABELS)
    # one line per run (and a header) where the table fits; else a block per run
    wide = len(lines) == 2 * len(LABELS) + 1
    assert wide == (width >= 200), lines[:3]


def test_runs_piped_without_a_width_are_one_line_each(cli, monkeypatch, tree):
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(console, "width", 60)
    lines = cli("runs", "--root", str(tree)).stdout.splitlines()
    assert len(lines) == 2 * len(LABELS) + 1 and lines[0].startswith("status")


@pytest.fixture(scope="module")
def claims_tree(tmp_path_factory) -> tuple[Path, Path]:
    from tests.unit.claims.test_claims_check import CLAIMS, TEXT, write_claims
    from tests.unit.report.report_trees import make_seed_tree

    root = tmp_path_factory.mktemp("claims")
    make_seed_tree(root / "results", TEXT, experiment="demo_claims")
    write_claims(root / "conf", "demo_claims", CLAIMS)
    return root / "conf", root / "results"


@pytest.mark.parametrize("width", WIDTHS)
def test_check_never_cuts_a_number(cli, monkeypatch, claims_tree, width):
    conf, results = claims_tree
    monkeypatch.setattr(console, "width", width)
    out = cli("--config-dir", str(conf), "check", str(results))
    assert out.returncode == 1, out.stderr  # one claim fails
    assert max(len(line) for line in out.stdout.splitlines()) <= width
    assert _cut(out.stdout) == []
    text = " ".join(out.stdout.replace("│", " ").split())
    for measured in ("4.100 ± 0.100", "3.050 ± 0.050", "2.057 ± 0.045", "1.003 ± 0.003"):
        assert measured in text, measured


def _mixed_tree(root: Path) -> None:
    """Copy runs trained at 64 and 256 tokens (one that did not learn): their labels read
    ``rope+yarn×4+ft@256 · L_train=256`` in one table by training length."""
    spec = [("rope", 64, 0.95), ("rope+yarn×4+ft@256", 256, 0.97), ("nope", 64, 0.01),
            ("sinusoidal+coupling+linear×16+ft@4096", 256, 0.9)]  # fmt: skip
    for i, (label, length, em) in enumerate(spec):
        run = root / "runs" / f"copy_{i}"
        run.mkdir(parents=True)
        ident = {"schema_version": 1, "run": run.name, "encoding": label, "task": "copy",
                 "model": "tiny", "seed": 0, "train_length": length,
                 "status": "trained"}  # fmt: skip
        (run / "run.json").write_text(json.dumps(ident))
        rows = [{**ident, "mode": "full", "overrides": "", "eval_length": n, "window": n,
                 "stride": n, "length_unit": "tokens", "status": "ok", "reason": "",
                 "loss": 1 + n / 1000, "exact_match": em if n <= length else em / 2}
                for n in (64, 128, 256, 512, 1024)]  # fmt: skip
        pd.DataFrame(rows).to_csv(run / "eval.csv", index=False)


@pytest.mark.parametrize("width", [60, 80, 120])
def test_labels_fold_between_their_parts_and_not_learned_stays_with_its_row(
    posx, tmp_path, monkeypatch, width
):
    """Issue 57.5: at 80 columns `rope+yarn×4+ft@2` / `56 · L_train=256` broke a label inside
    a part, and `not learned` had a line of its own in the label column, reading as a row."""
    _mixed_tree(tmp_path)
    monkeypatch.setenv("COLUMNS", str(width))
    out = posx("report", "--root", str(tmp_path), "--metric", "exact_match", "--by",
               "train_length")  # fmt: skip
    assert out.returncode == 0, out.stderr
    cells = [line.split("│")[1].strip() for line in out.stdout.splitlines()
             if line.startswith("│")]  # fmt: skip
    assert cells and max(map(len, out.stdout.splitlines())) <= width
    # each label's parts: a line of the label column holds whole parts only
    pieces = [["rope ", "· ", "L_train=64"], ["nope ", "· ", "L_train=64 ", "(not learned)"],
              ["rope+", "yarn×4+", "ft@256 ", "· ", "L_train=256"],
              ["sinusoidal+", "coupling+", "linear×16+", "ft@4096 ", "· ",
               "L_train=256"]]  # fmt: skip
    allowed = {"".join(p[i:j]).strip() for p in pieces for i in range(len(p))
               for j in range(i + 1, len(p) + 1)}  # fmt: skip
    assert [c for c in cells if c and c not in allowed] == [], out.stdout
    assert "not learned" not in cells and "(not learned)" in out.stdout


def _closed_pipe(*args: str) -> tuple[int, str]:
    """``posx ARGS | head -0``: stdout is a pipe its reader closed before posx wrote a line."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    env = {**os.environ, "POSX_DEBUG": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "posx", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    proc.stdout.close()  # posx takes ~0.3 s to start: every write it makes meets EPIPE
    err = proc.stderr.read()
    return proc.wait(timeout=120), err


def test_a_reader_that_stops_early_is_no_failure(tree, claims_tree):
    """Issue 57.7: `posx report | head` exited 1 (rich's answer to EPIPE), and `posx check |
    head` 1 too, which for check means a claim failed. The report: 0; check: its verdict."""
    code, err = _closed_pipe("report", "--root", str(tree))
    assert code == 0 and "Traceback" not in err, err
    code, err = _closed_pipe("runs", "--root", str(tree))
    assert code == 0 and "Traceback" not in err, err
    conf, results = claims_tree
    code, err = _closed_pipe("--config-dir", str(conf), "check", str(results))
    assert code == 1 and "Traceback" not in err, err  # one claim fails, as without the pipe
    code, err = _closed_pipe("--config-dir", str(conf), "check", str(results), "--experiment",
                             "demo_claims", "--min-seeds", "9")  # fmt: skip
    assert code == 3, err  # inconclusive: the verdict's status, not the pipe's
