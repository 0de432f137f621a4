"""The HTML report's structure: provenance header, each table followed by its own plots, the
configurations with links to every run's config, readable at laptop width."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd

from posx import __version__
from posx.report import make_report, render
from tests.unit.report.report_trees import LOG_BUCKETS, make_exact_tree, make_tree

VOID = {"meta", "img", "br", "hr", "link", "input"}


class Node:
    def __init__(self, tag: str, attrs: dict[str, str]) -> None:
        self.tag, self.attrs, self.children, self.text = tag, attrs, [], ""

    def find_all(self, tag: str) -> list[Node]:
        out = []
        for child in self.children:
            if child.tag == tag:
                out.append(child)
            out += child.find_all(tag)
        return out

    def all_text(self) -> str:
        return self.text + "".join(c.all_text() for c in self.children)


class TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.root = Node("document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        node = Node(tag, dict(attrs))
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_endtag(self, tag):
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>"
        self.stack.pop()

    def handle_data(self, data):
        self.stack[-1].text += data


def parse(page: str) -> Node:
    builder = TreeBuilder()
    builder.feed(page)
    assert builder.stack == [builder.root], "unclosed elements"
    return builder.root


def save_configs(root: Path) -> None:
    """A .hydra/config.yaml per run, so each run has a fingerprint and a config to link."""
    for info in root.rglob("run.json"):
        run = info.parent
        data = json.loads(info.read_text())
        (run / ".hydra").mkdir(exist_ok=True)
        (run / ".hydra" / "config.yaml").write_text(
            f"seed: {data['seed']}\nencoding:\n  _target_: x.{data['encoding']}\n"
        )


def test_each_table_is_followed_by_its_own_plots(tmp_path):
    make_tree(tmp_path / "a" / "res")
    make_exact_tree(tmp_path / "a" / "res2", LOG_BUCKETS)  # a second task: a second table
    for name in ("eval.csv", "eval_positions.csv"):
        path = next((tmp_path / "a" / "res2").rglob(name))
        pd.read_csv(path).assign(task="recall").to_csv(path, index=False)
    page = parse(render(make_report(tmp_path / "a", metric="loss"), "html"))
    sections = [s for s in page.find_all("section") if s.attrs.get("class") == "result"]
    assert [s.find_all("h2")[0].all_text().split(" · ")[0] for s in sections] == ["copy", "recall"]
    for section in sections:
        task = section.find_all("h2")[0].all_text().split(" · ")[0]
        assert len(section.find_all("table")) == 1
        captions = [f.find_all("figcaption")[0].all_text() for f in section.find_all("figure")]
        assert captions and all(f"_{task}_" in c for c in captions), captions
        assert {c.split("_")[0] for c in captions} >= {"length", "heatmap", "positions"}


def test_provenance_header_and_config_links(tmp_path):
    make_tree(tmp_path / "res")
    save_configs(tmp_path / "res")
    out = tmp_path / "site"
    out.mkdir()
    page = parse(render(make_report(tmp_path / "res", metric="loss"), "html", base=out))
    header = page.find_all("header")[0].all_text()
    assert f"posx {__version__}" in header and "generated 20" in header
    assert "git " in header or "not in a git tree" in header
    assert "6 run(s), 3 distinct config(s)" in header
    configs = page.find_all("table")[-1]
    links = [a.attrs["href"] for a in configs.find_all("a")]
    assert len(links) == 6
    for href in links:  # relative to the page's directory, and each opens a real config
        assert not href.startswith("/") and (out / href).resolve().is_file(), href
    assert 'name="viewport"' in render(make_report(tmp_path / "res", metric="loss"), "html")


def test_page_fits_a_laptop_screen(tmp_path):
    make_tree(tmp_path)
    page = render(make_report(tmp_path, metric="loss"), "html")
    # plots scale with the column (none of the old fixed 520 px cap); tables scroll in a box
    assert "max-width: 520px" not in page and "figure img { width: 100%" in page
    tree = parse(page)
    for table in tree.find_all("table"):
        assert any(table in d.children for d in tree.find_all("div")
                   if d.attrs.get("class") == "scroll")  # fmt: skip
