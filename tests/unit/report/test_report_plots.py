"""Report plots: every file written and non-empty, colours stable per encoding, no display."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex

from posx.errors import PosxError
from posx.report import make_report, render, report_figures, report_plots
from posx.report.plots.figures import write_plots
from posx.report.plots.style import KNOWN, PALETTE, encoding_colors
from tests.unit.report.report_trees import ENCODINGS, LOG_BUCKETS, make_exact_tree, make_tree


def test_every_plot_is_written_as_png_and_svg(tmp_path):
    make_tree(tmp_path / "res")
    report = make_report(tmp_path / "res", metric="loss")
    paths = write_plots(report_figures(report), tmp_path / "plots")
    stems = sorted({p.stem for p in paths})
    assert stems == [
        "heatmap_copy_tiny_L16_full_loss",
        "length_copy_tiny_L16_full_loss",
        "positions_copy_tiny_L16_full",
        "training_copy_tiny_L16",
    ]
    for path in paths:
        data = path.read_bytes()
        assert path.stat().st_size > 1000
        if path.suffix == ".png":
            assert data[:8] == b"\x89PNG\r\n\x1a\n"
        else:
            assert ET.fromstring(data).tag.endswith("svg")
    for _, fig in report_figures(report):  # drawn on the Agg canvas, never through a display
        assert isinstance(fig.canvas, FigureCanvasAgg)


def test_colours_are_the_same_for_an_encoding_in_every_plot(tmp_path):
    make_tree(tmp_path)
    figs = dict(report_figures(make_report(tmp_path, metric="loss")))
    colors = encoding_colors(ENCODINGS)
    for stem in ("length_copy_tiny_L16_full_loss", "positions_copy_tiny_L16_full"):
        lines = {ln.get_label().split(" ")[0]: ln.get_color() for ln in figs[stem].axes[0].lines}
        for enc in ENCODINGS:
            assert to_hex(lines[enc]) == colors[enc], (stem, enc)
    training = {
        ln.get_label().split(" ")[0]: ln.get_color()
        for ln in figs["training_copy_tiny_L16"].axes[0].lines
    }
    assert {enc: to_hex(c) for enc, c in training.items()} == {e: colors[e] for e in ENCODINGS}
    # the unsupported lengths are named in the length plot's legend
    labels = [ln.get_label() for ln in figs["length_copy_tiny_L16_full_loss"].axes[0].lines]
    assert "learned (no value at 32, 64)" in labels


def test_encoding_colours_fixed_for_known_names_and_distinct():
    a = encoding_colors(["rope", "zeta", "alpha"])
    b = encoding_colors(["alpha", "rope"])
    assert a["rope"] == b["rope"] == PALETTE[KNOWN.index("rope")]
    assert a["alpha"] == b["alpha"]
    assert len({a[n] for n in ("rope", "zeta", "alpha")}) == 3


def test_missing_positions_file_skips_that_plot(tmp_path):
    make_tree(tmp_path, positions=False)
    report = make_report(tmp_path, metric="loss")
    assert report.positions is None
    assert not any(stem.startswith("positions") for stem, _ in report_figures(report))


def test_html_embeds_every_plot(tmp_path):
    make_tree(tmp_path)
    report = make_report(tmp_path, metric="loss")
    page = render(report, "html")
    assert page.count('src="data:image/svg+xml;base64,') == len(report_figures(report)) == 4


def test_without_matplotlib_plots_fail_in_one_line(tmp_path, monkeypatch):
    make_tree(tmp_path)
    report = make_report(tmp_path, metric="loss")
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(PosxError, match=r"plots need matplotlib: pip install 'posx\[plots\]'"):
        report_figures(report)


def test_each_variant_has_its_own_colour_and_short_label(tmp_path):
    make_exact_tree(tmp_path, LOG_BUCKETS)
    # exact match 0 everywhere: learned=0 keeps the labels plain (not learned has its own test)
    figs = dict(report_figures(make_report(tmp_path, variants=["all"], learned=0)))
    length = figs["length_copy_tiny_L16_full_exact_match"].axes[0]
    colours = {
        ln.get_label(): to_hex(ln.get_color()) for ln in length.lines if ln.get_label()[0] != "_"
    }
    colours.pop("training length")
    assert set(colours) == {"rope", "rope+yarn×4", "rope+ntk×8"}
    assert len(set(colours.values())) == 3
    assert colours["rope"] == encoding_colors(["rope"])["rope"]  # the plain row keeps its colour
    positions = figs["positions_copy_tiny_L16_full"].axes[0]
    assert {ln.get_label(): to_hex(ln.get_color()) for ln in positions.lines
            if ln.get_label() in colours} == colours  # fmt: skip


def test_fraction_axes_are_zero_to_one(tmp_path):
    make_exact_tree(tmp_path, LOG_BUCKETS)
    figs = dict(report_figures(make_report(tmp_path, variants=["all"])))
    low, high = figs["length_copy_tiny_L16_full_exact_match"].axes[0].get_ylim()
    assert low < 0 < 1 < high and high - low < 1.1  # not the ±0.04 of an all-zero column
    heat = figs["heatmap_copy_tiny_L16_full_exact_match"]
    image = heat.axes[0].images[0]
    assert (image.norm.vmin, image.norm.vmax) == (0.0, 1.0)
    low, high = figs["positions_copy_tiny_L16_full"].axes[0].get_ylim()  # token accuracy
    assert low < 0 < 1 < high


def test_position_axis_has_integer_ticks_only(tmp_path):
    make_exact_tree(tmp_path, LOG_BUCKETS)
    fig = dict(report_figures(make_report(tmp_path)))["positions_copy_tiny_L16_full"]
    fig.canvas.draw()
    ax = fig.axes[0]
    low, high = ax.get_xlim()
    ticks = [t for t in ax.get_xticks() if low <= t <= high]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
    assert "0.5" not in [t.get_text() for t in ax.get_xticklabels()]


def test_single_bucket_positions_plot_is_left_out_with_the_reason(tmp_path):
    make_exact_tree(tmp_path)  # one bucket per length
    plots = report_plots(make_report(tmp_path))
    assert not any(stem.startswith("positions") for stem, _ in plots.figures)
    (stem, why), *_ = plots.skipped
    assert stem == "positions_copy_tiny_L16_full" and "single position bucket" in why
    page = render(make_report(tmp_path), "html")
    assert "single position bucket" in page


def test_titles_fit_inside_their_figures(tmp_path):
    make_exact_tree(tmp_path, LOG_BUCKETS)
    for stem, fig in report_figures(make_report(tmp_path, variants=["all"])):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        box = fig.axes[0].title.get_window_extent(renderer)
        assert box.x0 >= 0 and box.x1 <= fig.bbox.width, stem
