"""The verdicts on a terminal (issue 35, item 6): the full table where its columns fit, one block
per claim on a narrow terminal, never a claim id split across lines; and as JSON (item 9)."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest
from rich.console import Console

from posx.claims.find import check_root
from posx.claims.render import claims_section, to_markdown, to_rich
from tests.unit.claims.test_claims_check import CLAIMS, TEXT, write_claims
from tests.unit.report.report_trees import make_seed_tree

PRESET = "rope_scaling_demo"  # as long as the shipped presets' names (rope_scaling/...)
LONG = {  # ids as long as the shipped ones, and a "why" with a long list of labels
    "yarn_beats_plain_rope_at_4x": CLAIMS["variant"],
    "sinusoidal_degrades_more_than_alibi": CLAIMS["wrong"],
    "seeds_split_on_the_training_length": CLAIMS["split"],
    "a_term_with_no_rows_at_all": CLAIMS["absent"],
}
IDS = [f"{PRESET}/{ident}" for ident in LONG]


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    root = tmp_path_factory.mktemp("claims_render")
    make_seed_tree(root / "results", TEXT, experiment=PRESET)
    write_claims(root / "conf", PRESET, LONG)
    return check_root(root / "results", [root / "conf"])


def render(checked, width: int) -> list[str]:
    """The lines ``posx check`` prints on a terminal ``width`` columns wide."""
    console = Console(width=width, file=io.StringIO(), record=True)
    console.print(to_rich(claims_section(checked.verdicts, checked.notes)))
    return console.export_text().splitlines()


@pytest.mark.parametrize("width", [80, 100, 60])
def test_a_narrow_terminal_gets_one_block_per_claim(checked, width):
    lines = render(checked, width)
    assert max(len(line.rstrip()) for line in lines) <= width
    for ident in IDS:  # each id whole, on the line of its verdict where the two fit
        (line,) = [x for x in lines if ident in x]
        assert line.lstrip()[0] in "✓✗?" or len(f"? inconclusive  {ident}") > width, line
    text = "\n".join(lines)
    for label in ("statement", "measured", "seeds", "seed agreement", "paper", "why"):
        assert text.count(f"  {label}  ") == len(IDS), label
    assert "alibi > rope fails on the mean" in text and "rope+yarn×4 < rope: 3/3" in text
    assert "┃" not in text  # not the table


def test_a_wide_terminal_keeps_the_table(checked):
    lines = render(checked, 250)
    header = next(x for x in lines if "┃" in x and "claim" in x)
    for column in ("statement", "measured (mean ± std)", "seed agreement", "paper", "why"):
        assert column in header  # every column header on one line
    for ident in IDS:
        assert sum(ident in x for x in lines) == 1
    assert max(len(line.rstrip()) for line in lines) <= 250


def test_markdown_keeps_the_table_whatever_the_width(checked):
    text = to_markdown(claims_section(checked.verdicts, checked.notes))
    assert text.splitlines()[2].startswith("|  | claim | statement | measured (mean ± std) |")
    assert all(f"| {ident} |" in text for ident in IDS)


def test_verdicts_as_json_records(checked):
    from posx.claims.render import claims_json

    got = json.loads(claims_json(checked.verdicts, checked.notes))
    by_id = {c["id"]: c for c in got["claims"]}
    assert list(by_id) == IDS
    assert got["summary"] == {"claims": 4, "holds": 1, "fails": 1, "inconclusive": 2}
    holds = by_id[IDS[0]]
    assert holds["verdict"] == "holds" and holds["statement"] == "rope+yarnx4 < rope at 4x"
    assert holds["experiment"] == PRESET and holds["claim"] == "yarn_beats_plain_rope_at_4x"
    assert holds["seeds"] == 3 and holds["metric"] == "bpb" and holds["where"] == "at 4x (L=64)"
    assert [m["term"] for m in holds["measured"]] == ["rope+yarn×4", "rope"]
    rope = holds["measured"][1]
    assert rope["mean"] == pytest.approx(3.05) and rope["std"] == pytest.approx(0.05)
    assert rope["values"] == {"0": 3.0, "1": 3.1, "2": 3.05}
    assert holds["seed_agreement"] == "rope+yarn×4 < rope: 3/3" and holds["reason"] == ""
    assert holds["published"] == {"alibi": 18.41, "rope": [20.07, 31.58]}
    assert by_id[IDS[1]]["reason"] == "alibi > rope fails on the mean"
    absent = by_id[IDS[3]]
    assert absent["verdict"] == "inconclusive" and absent["seeds"] == 0
    assert all(m["mean"] is None for m in absent["measured"])  # NaN is null, never NaN
    assert any("✓ holds" in note for note in got["notes"])


def test_json_has_no_nan(tmp_path: Path):
    two = {k: v[:1] for k, v in TEXT.items()}  # one seed: every std is NaN
    make_seed_tree(tmp_path / "results", two, experiment=PRESET)
    write_claims(tmp_path / "conf", PRESET, {"ordering": CLAIMS["ordering"]})
    from posx.claims.render import claims_json

    text = claims_json(check_root(tmp_path / "results", [tmp_path / "conf"]).verdicts)
    assert "NaN" not in text
    (claim,) = json.loads(text)["claims"]
    assert all(m["std"] is None and not math.isnan(m["mean"]) for m in claim["measured"])
