"""``posx runs``: one line per run below a results root, from the files each run keeps.

Status: ``finished`` (trained and evaluated), ``trained`` (not evaluated), ``training`` (started;
running now, or killed without a trace), ``interrupted`` (resumable), ``failed``, or
``unreadable`` (its ``run.json`` cannot be read; the reason is shown instead of the values).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posx.saved import SavedRun
from posx.storage.results import find_runs

COLUMNS = ("status", "encoding", "task", "model", "L_train", "steps", "seed", "final loss",
           "eval lengths", "parent", "run")  # fmt: skip


@dataclass
class RunLine:
    """One run as ``posx runs`` lists it."""

    status: str
    encoding: str
    task: str
    model: str
    train_length: str
    steps: str  # "done/total"
    seed: str
    final_loss: str
    lengths: str  # the eval lengths with a value, e.g. "64,128,256"
    parent: str  # an extension's parent run (posx extend), else "—"
    path: str  # the root joined with the run's place under it: a path the commands take
    # the same fields as plain values (numbers, lists, None for unknown), for --format json
    record: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def cells(self) -> list[str]:
        return [self.status, self.encoding, self.task, self.model, self.train_length, self.steps,
                self.seed, self.final_loss, self.lengths, self.parent, self.path]  # fmt: skip


def _csv_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a small CSV file as text (without pandas: ``posx runs`` answers at once).

    Raises:
        ValueError: The file cannot be read as a table (bytes that are not text, a row with more
            fields than the header).
        OSError: It cannot be opened.
    """
    try:
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except csv.Error as err:
        raise ValueError(str(err)) from err
    if any(None in row for row in rows):  # more fields than the header names
        raise ValueError(f"{path}: a row has more fields than the header")
    return rows


def _metrics_tail(run: Path) -> dict[str, Any]:
    """The last row of the run's ``metrics.csv`` (numbers as numbers); {} when unreadable."""
    try:
        rows = _csv_rows(run / "metrics.csv")
    except (OSError, ValueError):
        return {}
    return {k: _parse(v) for k, v in rows[-1].items()} if rows else {}


def _parse(text: str) -> int | float | str:
    """A CSV cell as pandas reads it: an integer, a float (``2.0`` stays one), else the text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _lengths(run: Path) -> list[int] | None:
    """The eval lengths with a value (status ok); None when ``eval.csv`` cannot be read."""
    try:
        rows = _csv_rows(run / "eval.csv")
        ok = [r for r in rows if r.get("status", "ok") == "ok"]
        return sorted({int(float(r["eval_length"])) for r in ok})
    except (OSError, ValueError, KeyError):
        return None


def _number(value: Any) -> int | float | None:
    """A run.json or metrics.csv value as a plain number (None when it is none, or not one)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(number):
        return None
    return int(number) if number.is_integer() and not isinstance(value, float) else number


def _count(value: Any) -> int | None:
    """A step count, length or seed (metrics.csv holds them as floats) as an int."""
    number = _number(value)
    return None if number is None else int(number)


def _status(info: dict[str, Any], run: Path) -> str:
    status = str(info.get("status", "training"))
    if status == "trained":
        return "finished" if (run / "eval.csv").is_file() else "trained"
    return status


def run_record(run: SavedRun, root: Path) -> dict[str, Any]:
    """One run's fields as plain values: what ``posx runs`` shows, and ``--format json`` prints.

    Keys: ``status``, ``encoding``, ``task``, ``model``, ``L_train``, ``steps_done``,
    ``steps_total``, ``seed``, ``final_loss``, ``eval_lengths`` (the lengths with a value),
    ``parent`` (an extension's parent run, by directory name: ``posx extend``), ``run``
    (relative to ``root``), ``path`` (``root`` joined with ``run``: what ``posx eval``,
    ``posx extend`` and ``posx resume`` take, from where ``posx runs`` ran), and ``error``
    (why an ``unreadable`` run's ``run.json`` cannot be read, else None). Unknown values are
    None.
    """
    keys = ("encoding", "task", "model", "L_train", "steps_done", "steps_total", "seed",
            "final_loss", "eval_lengths", "parent")  # fmt: skip
    record: dict[str, Any] = {"status": "unreadable", **dict.fromkeys(keys)}
    relative = run.path.relative_to(root)
    record.update(run=str(relative), path=str(root / relative), error=None)
    info = run.recorded
    if run.info_error is not None:
        return {**record, "error": run.info_error[:60]}
    tail = _metrics_tail(run.path)
    status = _status(info, run.path)
    total = _count(info.get("steps"))
    done = total if status in ("finished", "trained") else info.get("step", tail.get("step", 0))
    done = None if status == "pretrained" else done  # evaluated, never trained by posx
    record.update(
        status=status,
        encoding=info.get("encoding"),
        task=info.get("task"),
        model=info.get("model"),
        L_train=_count(info.get("train_length")),
        steps_done=_count(done),
        steps_total=total,
        seed=_count(info.get("seed")),
        final_loss=_number(info.get("final_loss", tail.get("loss"))),
        eval_lengths=_lengths(run.path),
        parent=_parent(info),
    )
    return record


def _parent(info: dict[str, Any]) -> str | None:
    """An extension's parent run (its directory's name), from ``run.json``'s lineage."""
    parent = info.get("parent")
    return str(parent.get("run")) if isinstance(parent, dict) and parent.get("run") else None


def _text(value: Any) -> str:
    return "?" if value is None else str(value)


def run_line(run: SavedRun, root: Path) -> RunLine:
    """What ``posx runs`` shows for one run directory."""
    r = run_record(run, root)
    if r["status"] == "unreadable":
        return RunLine("unreadable", *["?"] * 7, r["error"], "?", r["path"], record=r)
    loss = r["final_loss"]
    lengths = r["eval_lengths"]
    return RunLine(
        status=r["status"],
        encoding=_text(r["encoding"]),
        task=_text(r["task"]),
        model=_text(r["model"]),
        train_length=_text(r["L_train"]),
        steps="pretrained"
        if r["status"] == "pretrained"
        else f"{_text(r['steps_done'])}/{_text(r['steps_total'])}",
        seed=_text(r["seed"]),
        final_loss="—" if loss is None else f"{loss:.4f}",
        lengths=",".join(map(str, lengths)) if lengths else "—",
        parent=r["parent"] or "—",
        path=r["path"],  # as the user types it to evaluate, extend or resume the run
        record=r,
    )


def list_runs(root: Path) -> list[RunLine]:
    """Every run below ``root`` (sorted by directory), one :class:`RunLine` each."""
    return [run_line(SavedRun(run), root) for run in find_runs(root)]


def format_runs(lines: list[RunLine], width: int | None = None) -> list[str]:
    """Aligned text lines, a header then one line per run, when they fit in ``width`` (or
    ``width`` is None: no terminal, e.g. piped to a file); narrower, one block per run: its
    directory, then its fields named, wrapped between fields (a value is never cut)."""
    table = [list(COLUMNS), *(line.cells() for line in lines)]
    widths = [max(len(row[i]) for row in table) for i in range(len(COLUMNS) - 1)]
    rows = [
        "  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
        for row in table
    ]
    if width is None or max(len(r) for r in rows) <= width:
        return rows
    return [text for line in lines for text in _block(line, width)]


# The fields of a run's block, named as the table's header names them (status and the label
# go unnamed, first).
_NAMED = ("task", "model", "L_train", "steps", "seed", "final loss", "eval lengths", "parent")


def _block(line: RunLine, width: int) -> list[str]:
    """One run on a narrow terminal: its directory, then ``status · encoding · task tiny · ...``
    wrapped between fields (a field wider than the line, between its commas or characters)."""
    cells = dict(zip(COLUMNS, line.cells(), strict=True))
    fields = [cells["status"], cells["encoding"]]
    fields += [f"{k} {cells[k]}" for k in _NAMED if not (k == "parent" and cells[k] == "—")]
    out = _fold(cells["run"], width)
    current = ""
    for field_ in fields:
        for piece in _pieces(field_, width - 2):
            joined = f"{current} · {piece}" if current else piece
            if current and len(joined) + 2 > width:
                out.append("  " + current)
                joined = piece
            current = joined
    return [*out, "  " + current]


def _pieces(text: str, room: int) -> list[str]:
    """``text`` as pieces of at most ``room`` characters, cut after its commas where it has
    them (a list of lengths), else anywhere (a label with no commas)."""
    if len(text) <= room:
        return [text]
    pieces, current = [], ""
    for part in text.replace(",", ",\0").split("\0"):
        if current and len(current) + len(part) > room:
            pieces.append(current)
            current = ""
        current += part
    pieces.append(current)
    return [chunk for piece in pieces for chunk in _fold(piece, room)]


def _fold(text: str, room: int) -> list[str]:
    """``text`` in lines of ``room`` characters (a directory or label wider than the line)."""
    room = max(room, 1)
    return [text[i : i + room] for i in range(0, len(text), room)] or [""]


def runs_json(lines: list[RunLine]) -> str:
    """The runs as a JSON list of objects with plain values (see :func:`run_record`)."""
    return json.dumps([line.record for line in lines], indent=2, ensure_ascii=False)
