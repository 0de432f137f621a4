"""`posx report` on a results tree made by real tiny runs: aggregates checked against pandas.

The tree (built once for the module): the copy task with nope/alibi/learned x seeds 0, 1 and an
eval-time variant (``eval.seed=7``) of every copy run, plus the text task with nope/alibi x
seeds 0, 1; all trained at 16 and evaluated at 16, 32, 64. Learned is unsupported past 16.
Every expected number below is recomputed here from the eval.csv files with pandas.
"""

from __future__ import annotations

import io
import json
import math
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

LENGTHS = "eval.lengths=[16,32,64]"
_TREE: dict[str, Path] = {}


@pytest.fixture
def tree(tiny_overrides, tmp_path_factory) -> Path:
    """The results root, trained and evaluated on first use and shared by the module's tests;
    built through ``posx.cli.main`` in this process (``posx report`` in a subprocess is
    test_subprocess_report_prints_tables)."""
    from tests.conftest import run_in_process

    def posx(*args: str) -> None:
        result = run_in_process(*args)
        assert result.returncode == 0, result.stderr

    if "root" not in _TREE:
        root = tmp_path_factory.mktemp("report_tree")
        base = [*tiny_overrides, f"root={root}", LENGTHS, "train.threads=1"]
        posx("train", "-m", "encoding=nope,alibi,learned", "seed=0,1", *base)
        copy_sweep = next((root / "sweeps").iterdir())
        posx("eval", "--root", str(copy_sweep), "--lengths", "16,32,64", "eval.seed=7")
        posx("train", "-m", "encoding=nope,alibi", "seed=0,1", *base, "task=text")
        _TREE["root"] = root
    return _TREE["root"]


def eval_rows(root: Path) -> pd.DataFrame:
    frames = []
    for path in sorted(root.rglob("eval.csv")):
        frame = pd.read_csv(path, keep_default_na=False, na_values=[""])
        frame["dir"] = str(path.parent)
        frames.append(frame)
    rows = pd.concat(frames, ignore_index=True)
    rows["overrides"] = rows["overrides"].astype(object).fillna("")
    rows["variant"] = rows["encoding"] + rows["overrides"].map(lambda o: f"+{o}" if o else "")
    return rows


def csv_of(cli, *args: str) -> pd.DataFrame:
    out = cli("report", *args, "--format", "csv")
    assert out.returncode == 0, out.stderr
    return pd.read_csv(io.StringIO(out.stdout), keep_default_na=False, na_values=[""])


def test_tree_has_what_the_tests_assume(tree):
    rows = eval_rows(tree)
    assert set(rows["task"]) == {"copy", "text"}
    assert rows.groupby(["task", "variant"])["seed"].nunique().eq(2).all()
    learned = rows[(rows["encoding"] == "learned") & (rows["eval_length"] > 16)]
    assert len(learned) == 8 and set(learned["status"]) == {"unsupported"}


def test_mean_std_n_and_ratio_match_pandas(cli, tree):
    rows = eval_rows(tree)
    ok = rows[rows["status"] == "ok"].copy()
    at_train = ok[ok["eval_length"] == ok["train_length"]].set_index(["dir", "overrides"])["loss"]
    ok["ratio"] = [
        loss / at_train[(d, o)]
        for loss, d, o in zip(ok["loss"], ok["dir"], ok["overrides"], strict=True)
    ]
    expected = ok.groupby(["task", "variant", "eval_length"]).agg(
        mean=("loss", "mean"),
        std=("loss", "std"),
        n=("loss", "count"),
        ratio_mean=("ratio", "mean"),
        ratio_std=("ratio", "std"),
    )
    got = csv_of(cli, "--root", str(tree), "--metric", "loss")
    got_ok = got[got["status"] == "ok"].set_index(["task", "variant", "eval_length"])
    assert set(got_ok.index) == set(expected.index)
    got_ok = got_ok.loc[expected.index]
    for col in ("mean", "std", "ratio_mean", "ratio_std"):
        assert np.allclose(got_ok[col], expected[col], rtol=1e-9, equal_nan=True), col
    assert (got_ok["n"] == expected["n"]).all() and (expected["n"] == 2).all()
    # the ratio really is a degradation measure: exactly 1 at the training length
    assert np.allclose(got_ok.xs(16, level="eval_length")["ratio_mean"], 1.0)

    bad = got[got["status"] != "ok"]
    assert set(bad["variant"]) == {"learned", "learned+eval.seed=7"}
    assert (bad["n"] == 0).all() and bad["mean"].isna().all()
    assert bad["reason"].str.contains("16 positions").all()


def test_best_per_column_matches_pandas(cli, tree):
    got = csv_of(cli, "--root", str(tree), "--metric", "loss")
    for _, col in got[got["n"] > 0].groupby(["task", "eval_length"]):
        expected = col["mean"] == col["mean"].min()
        assert (col["best"] == expected).all()


def expected_mrr(rows: pd.DataFrame) -> pd.DataFrame:
    """NoPE's aggregate, recomputed: per task, mean metric over lengths past training; ties
    share their average rank, and a copy column where every run is at 0 (copy's chance) carries
    no rank. Every run counts as learned (the test passes --learned 0)."""
    metric = {"copy": ("exact_match", False), "text": ("bpb", True)}
    ranks = {}
    for task, part in rows.groupby("task"):
        name, lower = metric[task]
        ok = part[(part["status"] == "ok") & (part["eval_length"] > 16)]
        means = ok.groupby(["variant", "eval_length"])[name].mean().unstack()
        means = means.reindex(sorted(part["variant"].unique()))
        worst = math.inf if lower else -math.inf
        # a variant without a value at some length (unsupported) scores the worst value
        scores = means.apply(lambda r, w=worst: w if r.isna().any() else r.mean(), axis=1)
        if not lower and (means.fillna(0) <= 0).all(axis=None):
            ranks[task] = pd.Series(math.nan, index=scores.index)
            continue
        ranks[task] = scores.rank(method="average", ascending=lower)
    table = pd.DataFrame(ranks)
    return pd.DataFrame({"mrr": (1 / table).mean(axis=1), "tasks": table.notna().sum(axis=1)})


def test_mean_reciprocal_rank_matches_pandas(cli, tree):
    expected = expected_mrr(eval_rows(tree))
    got = csv_of(cli, "--root", str(tree), "--rank", "--learned", "0").set_index("variant")
    assert list(got.columns) == ["mrr", "tasks", "copy", "text"]
    assert set(got.index) == set(expected.index)
    assert np.allclose(got.loc[expected.index, "mrr"], expected["mrr"], equal_nan=True)
    assert (got.loc[expected.index, "tasks"] == expected["tasks"]).all()
    assert list(got["mrr"].dropna()) == sorted(got["mrr"].dropna(), reverse=True)
    copy = pd.to_numeric(got["copy"], errors="coerce")
    if copy.notna().any():  # learned cannot run past its table, so it ranks last on copy
        assert copy["learned"] == copy.max()
    else:  # tiny runs copy nothing past training: the column carries no rank
        assert set(got["copy"]) == {"at chance"}


def parse_markdown_tables(text: str) -> list[list[list[str]]]:
    tables, current = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if not set("".join(cells)) <= set("-:"):
                current.append(cells)
        elif current:
            tables.append(current)
            current = []
    return tables + ([current] if current else [])


def test_markdown_parses_back_to_the_csv_numbers(cli, tree):
    csv = csv_of(cli, "--root", str(tree))
    md = cli("report", "--root", str(tree), "--format", "md")
    assert md.returncode == 0, md.stderr
    tables = parse_markdown_tables(md.stdout)
    assert len(tables) == 3  # copy, text, ranking
    for table, task in zip(tables[:2], ("copy", "text"), strict=True):
        header, *body = table
        assert header[:2] == ["encoding", "n"] and header[2:] == ["L=16", "L=32", "L=64"]
        part = csv[csv["task"] == task].set_index(["variant", "eval_length"])
        # a row that did not learn its task (the CSV's `learned`) is labelled so
        learned = part.groupby(level=0)["learned"].first()
        marked = {v if ok else f"{v} (not learned)": v for v, ok in learned.items()}
        assert sorted(r[0] for r in body) == sorted(marked)
        for row in body:
            for head, cell in zip(header[2:], row[2:], strict=True):
                rec = part.loc[(marked[row[0]], int(head[2:]))]
                if rec["n"] == 0:
                    assert re.fullmatch(r"unsupported \[\d+\]", cell), cell
                    continue
                value = float(cell.strip("*").split()[0].strip("*"))
                assert value == pytest.approx(rec["mean"], abs=6e-4)
                assert cell.startswith("**") == bool(rec["best"])
    assert "- [1] unsupported: Learned has 16 positions; asked for 32" in md.stdout


def test_filters_by_and_variants(cli, tree):
    only = csv_of(cli, "--root", str(tree), "--task", "copy", "--encoding", "nope,alibi")
    assert set(only["task"]) == {"copy"} and set(only["encoding"]) == {"nope", "alibi"}
    base = csv_of(cli, "--root", str(tree), "--variant", "base")
    assert base["overrides"].isna().all()  # empty in the CSV
    seeded = csv_of(cli, "--root", str(tree), "--variant", "eval.seed=7")
    assert set(seeded["variant"]) == {
        "nope+eval.seed=7",
        "alibi+eval.seed=7",
        "learned+eval.seed=7",
    }
    per_seed = csv_of(cli, "--root", str(tree), "--by", "seed", "--task", "text")
    assert (per_seed["n"] == 1).all() and set(per_seed["seed"]) == {0, 1}
    md = cli("report", "--root", str(tree), "--by", "task", "--format", "md").stdout
    assert "| alibi · task=copy |" in md and "| alibi · task=text |" in md


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--task", "nosuch"], "no results for --task 'nosuch'; available: copy, text"),
        (["--encoding", "rope"], "no results for --encoding 'rope'; available: alibi, learned"),
        (["--variant", "encoding.base=1"], "no results for --variant 'encoding.base=1'"),
        (["--task", "copy", "--metric", "bpb"], "metric 'bpb' is not recorded for task 'copy'"),
        (["--metric", "nosuch"], "unknown metric 'nosuch'; choose from auto, loss"),
        (["--by", "colour"], "unknown --by 'colour'; choose from"),
        (["--format", "pdf"], "unknown --format 'pdf'"),
        (["--rank-lengths", "some"], "unknown --rank-lengths 'some'"),
    ],
)
def test_bad_report_input_is_one_line(cli, tree, args, text):
    out = cli("report", "--root", str(tree), *args)
    lines = [x for x in out.stderr.splitlines() if x.strip()]
    assert out.returncode == 2 and len(lines) == 1 and text in lines[0], out.stderr


def test_json_holds_the_csv_cells_and_the_ranking(cli, tree):
    """Issue 35, item 9: `posx report --format json`, cell for cell the CSV, plus the ranking
    the terminal shows (two tasks)."""
    out = cli("report", "--root", str(tree), "--format", "json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    csv = csv_of(cli, "--root", str(tree))
    assert len(got["cells"]) == len(csv)
    cells = pd.DataFrame(got["cells"]).rename(columns={"ratio": "ratio_mean"})
    for col in ("mean", "std", "ratio_mean", "ratio_std"):
        assert np.allclose(cells[col].astype(float), csv[col], equal_nan=True), col
    for col in ("task", "label", "eval_length", "n", "status", "learned", "best"):
        assert cells[col].tolist() == csv[col].tolist(), col
    ranking = csv_of(cli, "--root", str(tree), "--rank")
    assert [r["label"] for r in got["rank"]] == ranking["variant"].tolist()
    assert set(got["rank"][0]["ranks"]) == {"copy", "text"}


class _Counter(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: dict[str, int] = {}
        self.srcs: list[str] = []
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self.srcs += [v for k, v in attrs if k == "src" and v]
        self.hrefs += [v for k, v in attrs if k == "href" and v]


def test_plots_latex_and_html_files(cli, tree, tmp_path):
    plots = tmp_path / "plots"
    out = cli("report", "--root", str(tree), "--plot", str(plots), "-o", str(tmp_path / "r.html"))
    assert out.returncode == 0, out.stderr
    assert f"plot files to {plots}/" in out.stdout and "Ranking across tasks" in out.stdout
    stems = {p.stem for p in plots.iterdir()}
    for kind in ("length", "heatmap"):
        assert {f"{kind}_copy_tiny_L16_full_exact_match", f"{kind}_text_tiny_L16_full_bpb"} <= stems
    assert {"training_copy_tiny_L16", "training_text_tiny_L16"} <= stems
    if any(tree.rglob("eval_positions.csv")):
        assert "positions_text_tiny_L16_full" in stems
        # copy scores only its answer span, one log bucket: no empty plot, the reason instead
        assert "positions_copy_tiny_L16_full" not in stems
        assert "no plot positions_copy_tiny_L16_full: per-position plot left out" in out.stderr
    for path in plots.iterdir():
        data = path.read_bytes()
        assert len(data) > 1000, path
        if path.suffix == ".png":
            assert data.startswith(b"\x89PNG\r\n\x1a\n")
        else:
            assert ET.fromstring(data).tag.endswith("svg")
    assert len(list(plots.iterdir())) == 2 * len(stems)

    assert cli("report", "--root", str(tree), "-o", str(tmp_path / "r.tex")).returncode == 0
    tex = (tmp_path / "r.tex").read_text()
    assert tex.count(r"\toprule") == tex.count(r"\bottomrule") == 3  # copy, text, ranking
    assert tex.count("{") == tex.count("}") and r"\textbf{" in tex
    assert r"unsupported\textsuperscript{1}" in tex and "\\_" in tex

    page = (tmp_path / "r.html").read_text()
    parser = _Counter()
    parser.feed(page)
    # copy, text, ranking and the configurations list
    assert parser.tags["table"] == 4 and parser.tags["img"] == len(stems)
    assert all(src.startswith("data:image/svg+xml;base64,") for src in parser.srcs)
    # nothing is loaded from elsewhere; the only links open each run's saved config
    configs = [h for h in parser.hrefs if not h.startswith("#")]
    assert configs and all(h.endswith("/.hydra/config.yaml") for h in configs)
    assert all((tmp_path / h).resolve().is_file() for h in configs)
    assert "Learned has 16 positions" in page


def test_subprocess_report_prints_tables(posx, tree):
    out = posx("report", "--root", str(tree), check=True).stdout
    assert "copy · model tiny" in out and "Ranking across tasks" in out
    assert "unsupported [1]" in out and "[1] unsupported: Learned has 16 positions" in out


@pytest.mark.slow  # a two-run sweep with sliding evaluation in a subprocess: ~25 s quiet
def test_a_sliding_evaluation_is_one_row_with_its_ratio(posx, cli, tiny_overrides, tmp_path):
    """Issue 30, item 2, as a user meets it: with the default sliding settings the row at the
    training length records stride = window and the longer ones stride = window/2; the report
    shows one row per run, with ×r and the "not learned" check, not two rows per run."""
    posx("train", "-m", "encoding=rope,alibi", *tiny_overrides, "eval.mode=sliding",
         "eval.lengths=[16,32,64]", check=True)  # fmt: skip
    rows = eval_rows(tmp_path)
    assert set(zip(rows["eval_length"], rows["stride"], strict=True)) == {(16, 16), (32, 8),
                                                                           (64, 8)}  # fmt: skip
    got = csv_of(cli, "--root", str(tmp_path), "--metric", "loss", "--learned-loss", "1e9")
    assert sorted(set(got["label"])) == ["alibi", "rope"]
    home = rows[rows["eval_length"] == 16].set_index("encoding")["loss"]
    past = rows[rows["eval_length"] > 16].set_index(["encoding", "eval_length"])["loss"]
    ratio = got.set_index(["label", "eval_length"])["ratio_mean"]
    for (enc, length), loss in past.items():
        assert ratio[(enc, length)] == pytest.approx(loss / home[enc])
    assert got["learned"].all()
    strict = csv_of(cli, "--root", str(tmp_path), "--metric", "loss", "--learned-loss", "1e-9")
    assert not strict["learned"].any()  # the check reads the row's own value at 16
    md = cli("report", "--root", str(tmp_path), "--format", "md").stdout
    assert "| rope" in md and "window=" not in md


def test_failing_a_task_does_not_raise_the_mrr(cli, tmp_path):
    """Issue 30, item 4, through ``posx report``: a variant that learns copy only (rank 1 there)
    no longer outranks one that learns copy and reverse (ranks 2 and 1)."""
    from tests.unit.report.report_trees import make_eval_tree

    for task, values in (
        ("copy", {"learns_both": (1.0, 0.5, 0.5), "learns_copy": (1.0, 0.9, 0.9)}),
        ("reverse", {"learns_both": (1.0, 0.5, 0.5), "learns_copy": (0.0, 0.0, 0.0)}),
    ):
        make_eval_tree(tmp_path, values, task=task, mode="full")
    got = csv_of(cli, "--root", str(tmp_path), "--rank").set_index("variant")
    assert dict(got["mrr"]) == pytest.approx({"learns_both": 0.75, "learns_copy": 0.75})
    assert dict(got["tasks"]) == {"learns_both": 2, "learns_copy": 2}
    assert got.loc["learns_copy", "reverse"] == "2 (not learned)"
