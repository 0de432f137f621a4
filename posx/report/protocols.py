"""Which eval rows form one evaluation of a run, and each row's value relative to the same
evaluation's value at the training length (the report's ``×r``).

A sliding evaluation records ``window=W stride=W`` at the training length (one window covers
it) and ``stride=W/2`` past it: both belong to one evaluation, so they are one report row
(docs/reports.md, "One sliding evaluation of a run = one row").
"""

from __future__ import annotations

import pandas as pd


def _evaluations(frame: pd.DataFrame, own: pd.Series) -> dict[tuple, list[tuple[int, str]]]:
    """Per (run, overrides): the (window, protocol text) of each sliding evaluation that has a
    row longer than its window, i.e. whose window and stride the rows state exactly."""
    rows = frame.loc[own, ["run_dir", "overrides", "window", "stride"]].drop_duplicates()
    out: dict[tuple, list[tuple[int, str]]] = {}
    for run, over, w, s in rows.itertuples(index=False):
        out.setdefault((run, over), []).append((int(w), f"window={int(w)} stride={int(s)}"))
    return out


def _covering(frame: pd.DataFrame, covering: pd.Series, own: pd.Series) -> list[tuple[int, str]]:
    """(row index, protocol text) for each sliding row whose one window covers its length,
    once per evaluation of its run it belongs to (see :func:`add_protocol`)."""
    evaluations = _evaluations(frame, own)
    out, alone = [], {}
    for i in frame.index[covering]:
        key = (frame.at[i, "run_dir"], frame.at[i, "overrides"])
        length = int(frame.at[i, "eval_length"])
        hits = [text for w, text in evaluations.get(key, []) if w >= length]
        out += [(i, text) for text in hits]
        if not hits:
            alone.setdefault(key, []).append((i, length))
    for rows in alone.values():  # covering rows only: one evaluation, its widest window named
        widest = max(length for _, length in rows)
        out += [(i, f"window={widest} stride={widest}") for i, _ in rows]
    return out


def add_protocol(frame: pd.DataFrame) -> pd.DataFrame:
    """Adds ``protocol``: the evaluation of its run a row belongs to, as label text.

    A sliding evaluation records the protocol it resolved at each length
    (:func:`posx.evaluation.protocol.resolve_protocol`): a window shorter than the length with
    its stride (``window=8 stride=4``), or, where the window covers the length, one window
    (``window = stride = L``; with the defaults, the row at the training length). A covering row
    reads the sequence as every sliding evaluation with a window of at least L would, so it
    belongs to each such evaluation of its run (same overrides) and is repeated once per
    evaluation (once, unless the run was evaluated with several windows or strides). Covering
    rows of a run with no such evaluation are one evaluation, named by their longest length.
    Full-mode rows (and rows without a recorded window) have ``""``.

    Returns:
        The rows, covering rows repeated as above, index reset.
    """
    frame = frame.reset_index(drop=True)
    if "window" not in frame or "stride" not in frame or "run_dir" not in frame:
        return frame.assign(protocol="")
    window = pd.to_numeric(frame["window"], errors="coerce")
    stride = pd.to_numeric(frame["stride"], errors="coerce")
    sliding = (frame["mode"] == "sliding") & window.notna() & stride.notna()
    own = sliding & (window < frame["eval_length"])
    protocol = pd.Series("", index=frame.index, dtype=object)
    protocol[own] = [
        f"window={int(w)} stride={int(s)}" for w, s in zip(window[own], stride[own], strict=True)
    ]
    covering = _covering(frame, sliding & ~own, own)
    others = frame.index[~(sliding & ~own)]
    index = [*others, *(i for i, _ in covering)]
    out = frame.loc[index].assign(protocol=[*protocol[others], *(t for _, t in covering)])
    return out.sort_index(kind="stable").reset_index(drop=True)


def add_ratio(frame: pd.DataFrame, column: str = "loss") -> pd.DataFrame:
    """Adds ``ratio``: each row's ``column`` over the same run's ``column`` at its training length.

    The reference is the run's own row at ``eval_length == train_length`` with the same mode,
    evaluation (``protocol``, :func:`add_protocol`; added here when missing, which may repeat
    rows) and eval-time overrides; when that was never evaluated, the run's plain row (mode
    ``full``, no overrides) at the training length. Without either, or when the reference is 0
    (an exact match of 0 at the training length), the ratio is NaN.
    """
    frame = add_protocol(frame) if "protocol" not in frame else frame.copy()
    keys = ["run_dir", "mode", "protocol", "overrides"]
    values = frame[column].astype(float)
    at_train = frame[(frame["status"] == "ok") & (frame["eval_length"] == frame["train_length"])]
    at_train = at_train.assign(_value=values)
    same = at_train.groupby(keys)["_value"].first()
    plain = at_train[(at_train["mode"] == "full") & (at_train["overrides"] == "")]
    plain = plain.groupby("run_dir")["_value"].first()
    ref = pd.Series(same.reindex(pd.MultiIndex.from_frame(frame[keys])).to_numpy(), frame.index)
    ref = ref.fillna(frame["run_dir"].map(plain))
    ref = ref.where(ref.abs() > 0)
    frame["ratio"] = values.where(frame["status"] == "ok") / ref
    return frame
