"""Report plots: every file written and non-empty, colours stable per encoding, no display."""

from __future__ import annotations

import json
import math
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex

from posx.errors import PosxError
from posx.report import make_report, render, report_figures
from posx.report.plots import KNOWN, PALETTE, encoding_colors, write_plots

ENCODINGS = {"rope": [2.0, 2.6, 4.0], "alibi": [2.0, 2.1, 2.2], "learned": [1.9, None, None]}


def make_tree(root: Path, positions: bool = True) -> None:
    """Two seeds of three encodings: eval.csv, eval_positions.csv, metrics.csv, run.json."""
    for enc, losses in ENCODINGS.items():
        for seed in (0, 1):
            run = root / "runs" / f"copy_{enc}_s{seed}"
            run.mkdir(parents=True)
            ident = {"schema_version": 1, "run": run.name, "encoding": enc, "task": "copy",
                     "model": "tiny", "seed": seed, "train_length": 16}  # fmt: skip
            (run / "run.json").write_text(json.dumps(ident))
            evals, buckets = [], []
            for length, loss in zip((16, 32, 64), losses, strict=True):
                ok = loss is not None
                key = {**ident, "mode": "full", "overrides": "", "eval_length": length,
                       "window": length, "stride": length}  # fmt: skip
                evals.append({**key, "status": "ok" if ok else "unsupported",
                              "reason": "" if ok else "too long",
                              "loss": loss + 0.1 * seed if ok else math.nan})  # fmt: skip
                if ok:
                    for start in range(0, length, 8):
                        buckets.append({**key, "status": "ok", "reason": "", "bucket_start": start,
                                        "bucket_end": start + 8, "tokens": 8,
                                        "loss": loss + start / 64, "acc": 0.5})  # fmt: skip
            pd.DataFrame(evals).to_csv(run / "eval.csv", index=False)
            if positions:
                pd.DataFrame(buckets).to_csv(run / "eval_positions.csv", index=False)
            steps = pd.DataFrame({"step": [10, 20, 30], "loss": [3.0, 2.5, 2.0 + seed / 10]})
            steps.to_csv(run / "metrics.csv", index=False)


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
