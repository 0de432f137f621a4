"""What the rendered plots show (issue 35, items 10-13), checked on the drawn figure: text inside
the figure, the legend off the data, the heatmap's best cells brightest, and per-position noise
drawn as a band over the bucket's token count."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from posx.report import make_report, report_figures
from tests.unit.report.report_trees import (
    LOG_BUCKETS,
    make_exact_tree,
    make_issue24_tree,
    make_seed_tree,
)

SCALINGS = [("yarn", 2), ("yarn", 4), ("ntk", 4), ("ntk", 8), ("pi", 2), ("pi", 4)]


def ten_rows(root: Path) -> None:
    """rope, its six scaling variants, alibi, t5 and nope: bpb on text at five lengths, two
    seeds each; the lines fan out over the whole plot, as a real sweep's do."""
    values = {
        "rope": (1.2, 1.9, 2.6, 3.2, 3.6),
        "alibi": (1.25, 1.3, 1.35, 1.37, 1.38),
        "t5": (1.22, 1.5, 1.8, 2.3, 2.9),
        "nope": (1.3, 2.4, 3.0, 3.5, 3.9),
    }
    for i, (kind, factor) in enumerate(SCALINGS):
        values[f"rope+{kind}×{factor}"] = tuple(1.2 + 0.01 * i + j * (0.15 + 0.12 * i)
                                                 for j in range(5))  # fmt: skip
    seeds = {k: [list(v), [x + 0.03 for x in v]] for k, v in values.items()}
    make_seed_tree(root, seeds, lengths=(16, 32, 64, 128, 256))


def fan(root: Path) -> None:
    """Ten rows of exact match on copy that fan out from ~0.93 at the training length to 0..0.5:
    they fill every corner of the plot, so there is no free spot for a legend inside it."""
    values = {
        "rope": (0.92, 0.1, 0.0, 0.0, 0.0),
        "alibi": (0.96, 0.8, 0.6, 0.45, 0.3),
        "t5": (0.9, 0.5, 0.2, 0.05, 0.0),
        "nope": (0.02, 0.0, 0.0, 0.0, 0.0),
    }
    for i, (kind, factor) in enumerate(SCALINGS):
        values[f"rope+{kind}×{factor}"] = tuple(max(0.0, 0.93 - j * (0.1 + 0.05 * i))
                                                 for j in range(5))  # fmt: skip
    seeds = {k: [list(v), [min(1.0, x + 0.02) for x in v]] for k, v in values.items()}
    make_seed_tree(root, seeds, task="copy", lengths=(16, 32, 64, 128, 256))


def drawn(fig):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def inside(box, fig) -> bool:
    return box.x0 >= 0 and box.y0 >= 0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height


def figure(root: Path, prefix: str, **options):
    figs = report_figures(make_report(root, **options))
    (fig,) = [f for stem, f in figs if stem.startswith(prefix)]
    return fig


# --- item 10: the colour bar's label ---------------------------------------------------------


@pytest.mark.parametrize("tree", ["exact", "ten"])
def test_heatmap_colour_bar_label_fits_inside_the_figure(tmp_path, tree):
    if tree == "exact":  # three rows: a short figure under a long label
        make_exact_tree(tmp_path, LOG_BUCKETS)
        fig = figure(tmp_path, "heatmap", variants=["all"], learned=0)
    else:
        ten_rows(tmp_path)
        fig = figure(tmp_path, "heatmap", variants=["all"])
    renderer = drawn(fig)
    bar = fig.axes[-1]
    label = bar.yaxis.label
    assert "[" in label.get_text() and "]" in label.get_text()  # the whole unit is there
    assert inside(label.get_window_extent(renderer), fig), label.get_text()
    low, high = sorted(bar.get_ylim())
    for value, tick in zip(bar.get_yticks(), bar.get_yticklabels(), strict=True):
        if low <= value <= high:  # ticks beyond the bar's range are not drawn
            assert inside(tick.get_window_extent(renderer), fig), tick.get_text()


# --- item 11: the length plot's legend ------------------------------------------------------


def data_points(ax) -> np.ndarray:
    """Display coordinates of every plotted line's points, and points along its segments."""
    out = []
    for line in ax.lines:
        if line.get_transform() != ax.transData or len(line.get_xydata()) == 0:
            continue  # the training-length rule spans the axes: not data
        xy = line.get_transform().transform(line.get_xydata())
        out.append(xy)
        for a, b in zip(xy[:-1], xy[1:], strict=True):
            out.append(a + np.linspace(0, 1, 25)[:, None] * (b - a))
    return np.concatenate(out)


def legend_of(fig, ax):
    legends = [*fig.legends, *([ax.get_legend()] if ax.get_legend() else [])]
    (legend,) = legends
    return legend


@pytest.mark.parametrize("tree", ["fan", "ten", "three"])
def test_length_legend_never_covers_the_data(tmp_path, tree):
    rows = 3 if tree == "three" else 10
    if tree != "three":
        (fan if tree == "fan" else ten_rows)(tmp_path)
        fig = figure(tmp_path, "length", variants=["all"])
    else:
        make_seed_tree(tmp_path, {"rope": [[1.2, 1.9, 2.6]], "alibi": [[1.25, 1.3, 1.35]],
                                  "t5": [[1.22, 1.5, 1.8]]})  # fmt: skip
        fig = figure(tmp_path, "length")
    renderer = drawn(fig)
    ax = fig.axes[0]
    legend = legend_of(fig, ax)
    box = legend.get_window_extent(renderer)
    assert inside(box, fig)
    points = data_points(ax)
    x, y = points[:, 0], points[:, 1]
    covered = (box.x0 <= x) & (x <= box.x1) & (box.y0 <= y) & (y <= box.y1)
    assert not np.any(covered), f"legend covers {int(np.sum(covered))} plotted points"
    assert len(legend.get_texts()) == rows + 1  # every row and the training length


# --- item 12: the heatmap's brightest cells are the best -------------------------------------


def luminance(rgba) -> float:
    r, g, b, _ = rgba
    return 0.299 * r + 0.587 * g + 0.114 * b


@pytest.mark.parametrize("kind", ["lower", "higher"])
def test_heatmap_best_cells_are_the_brightest(tmp_path, kind):
    if kind == "lower":  # bpb: lower is better
        ten_rows(tmp_path)
        fig = figure(tmp_path, "heatmap", variants=["all"])
    else:  # exact match: higher is better
        make_issue24_tree(tmp_path)
        figs = dict(report_figures(make_report(tmp_path)))
        fig = figs["heatmap_copy_tiny_L16_full_exact_match"]
    image = fig.axes[0].images[0]
    values = np.asarray(image.get_array(), dtype=float)
    best = np.nanmin(values) if kind == "lower" else np.nanmax(values)
    worst = np.nanmax(values) if kind == "lower" else np.nanmin(values)
    colour = lambda v: image.cmap(image.norm(v))  # noqa: E731
    assert luminance(colour(best)) > luminance(colour(worst)) + 0.5, (best, worst)


# --- item 13: per-position noise ------------------------------------------------------------


def noisy_tree(root: Path, task: str = "text", seeds: int = 1, sequences: int = 4) -> None:
    """Runs evaluated on few sequences: each log bucket holds ``sequences x width`` tokens, and
    the bucket values zigzag as a few sequences' values do."""
    rng = np.random.default_rng(0)
    for enc in ("rope", "alibi"):
        for seed in range(seeds):
            run = root / "runs" / f"{task}_{enc}_s{seed}"
            run.mkdir(parents=True)
            ident = {"schema_version": 1, "run": run.name, "encoding": enc, "task": task,
                     "model": "tiny", "seed": seed, "train_length": 16}  # fmt: skip
            (run / "run.json").write_text(json.dumps(ident))
            key = {**ident, "mode": "full", "overrides": "", "eval_length": 64, "window": 64,
                   "stride": 64, "status": "ok", "reason": ""}  # fmt: skip
            buckets = [
                {**key, "bucket_start": lo, "bucket_end": hi, "tokens": sequences * (hi - lo),
                 "loss": 2.0 + rng.normal(0, 0.4), "acc": float(rng.uniform(0.2, 0.8))}
                for lo, hi in LOG_BUCKETS
            ]  # fmt: skip
            frame = pd.DataFrame(buckets)
            tokens = frame["tokens"].sum()
            loss = float((frame["loss"] * frame["tokens"]).sum() / tokens)
            acc = float((frame["acc"] * frame["tokens"]).sum() / tokens)
            row = {**key, "loss": loss, "acc": acc, "tokens": tokens, "sequences": sequences}
            # text reports bits per byte (4 bytes a token here), copy exact match
            row |= {"bpb": loss / math.log(2) / 4} if task == "text" else {"exact_match": 0.0}
            pd.DataFrame([row]).to_csv(run / "eval.csv", index=False)
            frame.to_csv(run / "eval_positions.csv", index=False)


def token_axes(fig):
    (ax,) = [a for a in fig.axes if "tokens" in a.get_ylabel()]
    return ax


def band_widths(ax) -> list[tuple[float, float]]:
    """(x in data, the band's height there) for every band (fill_between) in ``ax``."""
    out = []
    for band in ax.collections:
        for path in band.get_paths():
            xy = path.vertices
            for x in np.unique(xy[:, 0]):
                ys = xy[xy[:, 0] == x, 1]
                out.append((round(float(x), 6), float(ys.max() - ys.min())))
    return out


def test_positions_plot_shows_the_tokens_each_bucket_holds(tmp_path):
    noisy_tree(tmp_path, sequences=4)
    fig = figure(tmp_path, "positions")
    renderer = drawn(fig)
    counts = token_axes(fig)
    assert counts.get_yscale() == "log"
    heights = sorted(round(p.get_height()) for p in counts.patches)
    assert heights == [4 * (hi - lo) for lo, hi in LOG_BUCKETS]  # one bar per bucket
    for text in fig.texts:
        assert inside(text.get_window_extent(renderer), fig), text.get_text()


def test_token_accuracy_band_is_a_wilson_interval_from_the_bucket_tokens(tmp_path):
    noisy_tree(tmp_path, task="copy", sequences=4)  # one run: the band comes from its tokens
    fig = figure(tmp_path, "positions")
    ax = fig.axes[0]
    part = pd.concat(pd.read_csv(p) for p in tmp_path.rglob("eval_positions.csv"))
    rope = part[part["encoding"] == "rope"]
    widths = band_widths(ax)
    for _, b in rope.iterrows():
        p, n, z = b["acc"], b["tokens"], 2.0
        wilson = 2 * z * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / (1 + z**2 / n)
        x = round((b["bucket_start"] + b["bucket_end"]) / 2, 6)
        assert any(w == pytest.approx(wilson, rel=1e-6) for xx, w in widths if xx == x)
    assert max(w for _, w in widths) > 0.5  # 4 tokens: about anything is chance
    captions = " ".join(t.get_text() for t in fig.texts)
    assert "Wilson interval (z=2)" in captions and "independent" in captions


def test_loss_band_without_a_recorded_spread_says_so(tmp_path):
    noisy_tree(tmp_path, task="text", sequences=4)  # one seed: no spread of the loss recorded
    fig = figure(tmp_path, "positions")
    assert not fig.axes[0].collections  # no band made up
    captions = " ".join(t.get_text() for t in fig.texts)
    assert "eval_positions.csv" in captions and "no band" in captions


def test_loss_band_over_seeds_is_two_standard_errors_of_their_mean(tmp_path):
    noisy_tree(tmp_path, task="text", seeds=3, sequences=4)
    fig = figure(tmp_path, "positions")
    widths = band_widths(fig.axes[0])
    part = pd.concat(pd.read_csv(p) for p in tmp_path.rglob("eval_positions.csv"))
    factor = 1 / math.log(2) / 4  # the runs' bpb/loss
    rope = part[part["encoding"] == "rope"].groupby("bucket_start")["loss"]
    for start, se in (rope.std() * factor / math.sqrt(3)).items():
        end = dict(LOG_BUCKETS)[start]
        x = round((start + end) / 2, 6)
        assert any(w == pytest.approx(4 * se, rel=1e-6) for xx, w in widths if xx == x)
    captions = " ".join(t.get_text() for t in fig.texts)
    assert "2 SE" in captions and "3 seeds" in captions


def test_rows_with_different_token_counts_each_get_their_own_count_line(tmp_path):
    noisy_tree(tmp_path, sequences=4)
    path = tmp_path / "runs" / "text_alibi_s0" / "eval_positions.csv"
    frame = pd.read_csv(path)
    frame.assign(tokens=frame["tokens"] * 2).to_csv(path, index=False)  # alibi read 8 sequences
    counts = token_axes(figure(tmp_path, "positions"))
    assert not counts.patches
    lines = sorted(tuple(line.get_ydata()) for line in counts.lines if line.get_gid() != "rule")
    fours = tuple(float(4 * (hi - lo)) for lo, hi in LOG_BUCKETS)
    assert lines == [fours, tuple(2 * t for t in fours)]


# --- issue 48: one number of decimals per heatmap --------------------------------------------


def test_heatmap_cells_have_the_same_decimals(tmp_path):
    """3.70 beside 3.36, never 3.7 (``.3g`` dropped a trailing zero, and digits of larger
    values)."""
    from tests.unit.report.report_trees import make_seed_tree

    make_seed_tree(tmp_path, {"rope": [[3.7, 3.36, 4.0]], "alibi": [[3.5, 3.512, 3.6]]})
    fig = figure(tmp_path, "heatmap")
    cells = sorted(t.get_text() for t in fig.axes[0].texts)
    assert cells == ["3.36", "3.50", "3.51", "3.60", "3.70", "4.00"]
