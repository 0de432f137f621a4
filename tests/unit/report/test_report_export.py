"""Every export renders the same cells and parses back: Markdown, CSV, LaTeX, HTML, rich."""

from __future__ import annotations

import io
import json
import math
import re
from html.parser import HTMLParser

import pandas as pd
import pytest
from rich.console import Console

from posx.report.export import to_csv, to_markdown, to_rich
from posx.report.html import to_html
from posx.report.latex import tex_escape, to_latex
from posx.report.rank import rank_table
from posx.report.tables import pivot, summarize


def row(enc, seed, length, loss, task="copy", overrides="", status="ok"):
    ok = status == "ok"
    return {
        "run_dir": f"{task}_{enc}_{seed}",
        "encoding": enc,
        "task": task,
        "model": "tiny",
        "seed": seed,
        "train_length": 8,
        "mode": "full",
        "overrides": overrides,
        "eval_length": length,
        "status": status,
        "reason": "" if ok else "50% of the table | too long",
        "loss": loss if ok else math.nan,
    }


ROWS = [
    row("rope", 0, 8, 1.0), row("rope", 1, 8, 1.2),
    row("rope", 0, 16, 3.0), row("rope", 1, 16, 3.4),
    row("my_enc", 0, 8, 0.9), row("my_enc", 0, 16, 1.1),
    row("learned", 0, 8, 0.8), row("learned", 0, 16, None, status="unsupported"),
    row("rope", 0, 16, 2.0, overrides="encoding.scaling.factor=2"),
    row("rope", 0, 32, 2.5, task="text"), row("rope", 0, 8, 1.0, task="text"),
    row("alibi", 0, 32, 1.5, task="text"), row("alibi", 0, 8, 1.0, task="text"),
]  # fmt: skip


@pytest.fixture
def report():
    summary = summarize(pd.DataFrame(ROWS), "loss")
    tables = pivot(summary)
    return summary, tables, rank_table(tables)


def md_tables(text: str) -> list[list[list[str]]]:
    blocks = re.split(r"\n\s*\n", text)
    out = []
    for block in blocks:
        lines = [x for x in block.splitlines() if x.startswith("|")]
        if lines:
            out.append([[c.strip() for c in re.split(r"(?<!\\)\|", x)[1:-1]] for x in lines])
    return out


def test_markdown_parses_back(report):
    summary, tables, rank = report
    text = to_markdown(tables, rank)
    copy, text_task, ranking = md_tables(text)
    assert copy[0] == ["encoding", "n", "L=8", "L=16"] and copy[1][0] == "---"
    body = {r[0]: r[1:] for r in copy[2:]}
    # ×r is the mean of the runs' own ratios: (3.0/1.0 + 3.4/1.2) / 2 = 2.9167
    assert body["rope"] == ["2", "1.100 ± 0.141", "3.200 ± 0.283 ×2.92"]
    assert body["my_enc"] == ["1", "0.900", "**1.100** ×1.22"]
    assert body["learned"] == ["1", "**0.800**", "unsupported [1]"]
    assert body["rope+scaling.factor=2"] == ["1", "—", "2.000 ×2.00"]
    assert "- [1] unsupported: 50% of the table \\| too long" in text
    assert ranking[0] == ["encoding", "MRR", "tasks ranked", "copy", "text"]
    assert {r[0]: r[1] for r in ranking[2:]}["alibi"] == "1.000"
    assert text_task[2][0] == "alibi"


def test_fewer_seeds_than_the_row_are_flagged():
    rows = [row("rope", 0, 8, 1.0), row("rope", 1, 8, 1.2), row("rope", 0, 16, 3.0)]
    (table,) = pivot(summarize(pd.DataFrame(rows), "loss"))
    assert "3.000 ×3.00 (n=1)" in to_markdown([table])


def test_csv_round_trip(report):
    summary, _, rank = report
    back = pd.read_csv(io.StringIO(to_csv(summary)), keep_default_na=False, na_values=[""])
    assert list(back.columns) == list(summary.columns)
    assert back["mean"].equals(summary["mean"]) and back["n"].equals(summary["n"])
    ranks = pd.read_csv(io.StringIO(to_csv(rank)))
    assert list(ranks.columns) == ["variant", "mrr", "tasks", "copy", "text"]


def test_latex_is_booktabs_and_escaped(report):
    _, tables, rank = report
    tex = to_latex(tables, rank)
    assert tex.count(r"\begin{table}") == tex.count(r"\end{table}") == 3
    assert tex.count(r"\toprule") == tex.count(r"\midrule") == tex.count(r"\bottomrule") == 3
    assert "my\\_enc" in tex and r"50\% of the table | too long" in tex
    assert r"3.200 $\pm$ 0.283 {\scriptsize $\times$2.92}" in tex
    assert r"\textbf{0.800}" in tex and r"unsupported\textsuperscript{1}" in tex
    assert tex.count("{") == tex.count("}")
    assert (
        tex_escape("a_b & c~^\\") == r"a\_b \& c\textasciitilde{}\textasciicircum{}\textbackslash{}"
    )


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.refs: list[str] = []
        self.cells: list[str] = []
        self._in_td = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.refs += [v for k, v in attrs if k in ("src", "href")]
        if tag == "td":
            self._in_td = True
            self.cells.append("")

    def handle_endtag(self, tag):
        if tag == "td":
            self._in_td = False

    def handle_data(self, data):
        if self._in_td:
            self.cells[-1] += data


def test_html_is_one_self_contained_page(report):
    _, tables, rank = report
    svg = b'<svg xmlns="http://www.w3.org/2000/svg"><rect width="1" height="1"/></svg>'
    page = to_html(tables, rank, [("length_copy", svg)])
    parser = Page()
    parser.feed(page)
    assert page.startswith("<!DOCTYPE html>") and parser.tags.count("table") == 3
    assert parser.refs == [
        "data:image/svg+xml;base64,PHN2ZyB4bWxucz0iaHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmciPjxyZWN0IHdpZHRoPSIxIiBoZWlnaHQ9IjEiLz48L3N2Zz4="
    ]
    assert "3.200 ± 0.283 ×2.92" in parser.cells and "unsupported1" in parser.cells
    assert 'title="unsupported: 50% of the table | too long"' in page
    assert '<td class="best">0.800</td>' in page


def test_rich_shows_notes_best_and_ranking(report):
    _, tables, rank = report
    console = Console(width=160, record=True, file=io.StringIO())
    for renderable in to_rich(tables, rank):
        console.print(renderable)
    text = console.export_text()
    assert "unsupported [1]" in text and "[1] unsupported: 50% of the table | too long" in text
    assert "3.200 ± 0.283 ×2.92" in text and "Ranking across tasks" in text
    assert "copy · model tiny · trained at 8 tokens · mode full · loss [nats/token], lower" in text


def test_json_has_one_record_per_cell_and_the_ranking(report):
    """Issue 35, item 9: the summary as JSON records (NaN as null), the ranking beside it."""
    from posx.report.output import to_json

    summary, _, rank = report
    text = to_json(summary, rank)
    assert "NaN" not in text
    got = json.loads(text)
    cells = {(c["task"], c["label"], c["eval_length"]): c for c in got["cells"]}
    assert len(got["cells"]) == len(cells) == len(summary)
    rope = cells[("copy", "rope", 16)]
    assert (rope["mean"], rope["n"], rope["metric"]) == (pytest.approx(3.2), 2, "loss")
    assert rope["std"] == pytest.approx(0.2828, abs=1e-4)
    assert rope["ratio"] == pytest.approx((3.0 / 1.0 + 3.4 / 1.2) / 2)
    assert rope["status"] == "ok" and rope["learned"] is True and rope["best"] is False
    one = cells[("copy", "my_enc", 16)]
    assert one["std"] is None and one["best"] is True  # one seed: no spread
    bad = cells[("copy", "learned", 16)]
    assert (bad["n"], bad["mean"], bad["status"]) == (0, None, "unsupported")
    assert bad["reason"] == "50% of the table | too long"
    assert got["rank_lengths"] == "ood"
    ranks = {r["label"]: r for r in got["rank"]}
    assert ranks["alibi"] == {"label": "alibi", "mrr": 1.0, "tasks": 1,
                              "ranks": {"copy": None, "text": 1.0}}  # fmt: skip
    assert json.loads(to_json(summary, None))["rank"] is None


@pytest.fixture
def tree(tmp_path):
    from tests.unit.report.report_trees import make_tree

    make_tree(tmp_path / "results")
    return tmp_path / "results"


def test_report_format_json_prints_only_json(cli, tree, tmp_path):
    out = cli("report", "--root", str(tree), "--metric", "loss", "--format", "json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)  # the whole of stdout: nothing else is printed there
    assert {c["label"] for c in got["cells"]} == {"rope", "alibi", "learned"}
    assert len(got["cells"]) == 9 and got["rank"] is None
    csv = cli("report", "--root", str(tree), "--metric", "loss", "--format", "csv").stdout
    back = pd.read_csv(io.StringIO(csv), keep_default_na=False, na_values=[""])
    assert [c["mean"] for c in got["cells"]] == [
        None if math.isnan(x) else pytest.approx(x) for x in back["mean"]
    ]
    # the plots' message goes to stderr, so that stdout stays one JSON document
    plots = cli(
        "report",
        "--root",
        str(tree),
        "--metric",
        "loss",
        "-f",
        "json",
        "--plot",
        str(tmp_path / "p"),
    )
    assert plots.returncode == 0 and json.loads(plots.stdout)["cells"]
    assert "plot files to" in plots.stderr


def test_report_json_file(cli, tree, tmp_path):
    out = cli(
        "report", "--root", str(tree), "--metric", "loss", "-o", str(tmp_path / "r.json"), "--rank"
    )
    assert out.returncode == 0, out.stderr
    got = json.loads((tmp_path / "r.json").read_text())
    assert got["cells"] and [r["label"] for r in got["rank"]][0] == "alibi"
    assert f"wrote {tmp_path / 'r.json'}" in out.stdout
