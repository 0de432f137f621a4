"""What makes a result table unusable for a report: a foreign header, text where numbers belong,
integers past int64, a newer schema. ``posx report`` leaves such a table out with a warning."""

from __future__ import annotations

import pandas as pd

from posx.storage.results import SCHEMA_VERSION

# Columns a table must have, and the ones that must hold integers (int64) or numbers.
REQUIRED = {
    "eval.csv": ("encoding", "task", "model", "train_length", "eval_length"),
    "eval_positions.csv": ("encoding", "task", "model", "train_length", "eval_length",
                           "bucket_start", "bucket_end"),
    "metrics.csv": ("step", "loss"),
}  # fmt: skip
INTEGER_COLUMNS = ("schema_version", "train_length", "eval_length", "seed", "bucket_start",
                   "bucket_end", "step", "window", "stride")  # fmt: skip
NUMBER_COLUMNS = ("loss", "ppl", "bpb", "acc", "exact_match", "tokens", "chance")
INT64_MAX = 2**63 - 1


def table_problem(frame: pd.DataFrame, name: str) -> str | None:
    """What makes a loaded table unusable (a foreign header, text where numbers belong, a
    newer schema), or ``None``."""
    missing = [c for c in REQUIRED.get(name, ()) if c not in frame]
    if missing:
        return f"it has no {', '.join(missing)} column (not a posx {name}?)"
    for col in [c for c in (*INTEGER_COLUMNS, *NUMBER_COLUMNS) if c in frame]:
        given = frame[col].notna() & (frame[col].astype(str).str.strip() != "")
        values = pd.to_numeric(frame[col].where(given), errors="coerce")
        bad = given & values.isna()
        if col in ("train_length", "eval_length", "seed"):  # identity: never empty
            bad |= ~given
        if col in INTEGER_COLUMNS:
            bad |= given & ((values % 1 != 0) | (values.abs() > INT64_MAX))
        if bad.any():
            line = int(bad.to_numpy().nonzero()[0][0]) + 2  # 1-based, after the header
            kind = "an integer (int64)" if col in INTEGER_COLUMNS else "a number"
            return f"{col} {frame[col][bad].iloc[0]!r} in line {line} is not {kind}"
    if "schema_version" in frame:
        version = pd.to_numeric(frame["schema_version"], errors="coerce").max()
        if pd.isna(version) or version > SCHEMA_VERSION:
            shown = version if pd.isna(version) else int(version)
            return f"it has an unknown schema version ({shown}); upgrade posx"
    return None
