"""RULER's table: tasks x lengths with the average row and the effective length, for one model
(and variant) at a time, as ``posx eval hf:... --suite ruler`` prints it and ``posx report``
shows it for every run with ``ruler/*`` rows."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from posx.report.tables import Section
from posx.ruler.registry import TASKS
from posx.ruler.scoring import THRESHOLD, effective_length

PREFIX = "ruler/"
AVERAGE = "ruler/average"


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _cell(row: Mapping[str, Any] | None) -> str:
    if row is None:
        return "-"
    status = str(row.get("status") or "ok")
    if status != "ok":
        return status
    value = _number(row.get("score"))
    return "-" if math.isnan(value) else f"{value:.1f}"


def _order(task: str) -> tuple[int, str]:
    name = task[len(PREFIX) :]
    names = list(TASKS)
    return (names.index(name) if name in names else len(names), name)


def effective(rows: Iterable[Mapping[str, Any]], threshold: float = THRESHOLD) -> int | None:
    """The effective length of one model's (one variant's) average rows."""
    by_length = {
        int(r["eval_length"]): _number(r.get("score"))
        if r.get("status", "ok") == "ok"
        else math.nan
        for r in rows
        if r.get("task") == AVERAGE
    }
    return effective_length(by_length, threshold)


def table_lines(rows: list[Mapping[str, Any]], threshold: float = THRESHOLD) -> list[str]:
    """One model's and variant's ``ruler/*`` rows as aligned lines: a row per task, the
    average, and the effective length at ``threshold``."""
    lengths = sorted({int(r["eval_length"]) for r in rows})
    cells = {(str(r["task"]), int(r["eval_length"])): r for r in rows}
    tasks = sorted({str(r["task"]) for r in rows if r["task"] != AVERAGE}, key=_order)
    width = max(len(t) - len(PREFIX) for t in [*tasks, "ruler/average"])
    head = " " * width + "".join(f"{length:>9}" for length in lengths)
    lines = [head]
    for task in [*tasks, AVERAGE]:
        line = f"{task[len(PREFIX) :]:<{width}}"
        line += "".join(f"{_cell(cells.get((task, length))):>9}" for length in lengths)
        lines.append(line)
    counted = [_number(r.get("samples")) for r in rows if r["task"] != AVERAGE]
    samples = sorted({int(n) for n in counted if not math.isnan(n)})
    found = effective(rows, threshold)
    reach = f"{found}" if found is not None else f"below {lengths[0]} (no length reaches it)"
    counts = ", ".join(map(str, samples)) or "no"
    lines.append(f"effective length at {threshold:g}: {reach}; {counts} samples per task")
    return lines


def ruler_table(rows: list[Mapping[str, Any]], threshold: float = THRESHOLD) -> list[str]:
    """Every (model, variant) group of ``ruler/*`` rows as a titled table (no lines without
    such rows)."""
    ours = [r for r in rows if str(r.get("task", "")).startswith(PREFIX)]
    lines: list[str] = []

    def key(r: Mapping[str, Any]) -> tuple[str, str]:
        return str(r.get("encoding", "")), str(r.get("overrides") or "")

    for label, overrides in dict.fromkeys(map(key, ours)):
        group = [r for r in ours if key(r) == (label, overrides)]
        title = f"RULER {label} {overrides or '(as saved)'}".replace("  ", " ").strip()
        lines += [f"{title}: score in percent (string_match_all)", *table_lines(group, threshold)]
    return lines


def ruler_sections(frame: Any, threshold: float = THRESHOLD) -> list[Section]:
    """One :class:`~posx.report.tables.Section` per labelled row group (a model and variant)
    of the report's rows that holds ``ruler/*`` rows: tasks x lengths, the average, and the
    effective length in its notes."""
    if frame is None or "task" not in frame or not len(frame):
        return []
    ours = frame[frame["task"].astype(str).str.startswith(PREFIX)]
    sections = []
    for label, part in ours.groupby("label", sort=True):
        rows = part.to_dict("records")
        lines = table_lines(rows, threshold)
        lengths = sorted({int(r["eval_length"]) for r in rows})
        body = [line.split() for line in lines[1:-1]]
        sections.append(
            Section(
                title=f"RULER {label}: score in percent (string_match_all)",
                header=["task", *map(str, lengths)],
                rows=body,
                notes=[lines[-1]],
            )
        )
    return sections


def section_lines(section: Section) -> list[str]:
    """A section as aligned text lines (the terminal's view of :func:`ruler_sections`)."""
    widths = [
        max(len(str(c)) for c in col) for col in zip(section.header, *section.rows, strict=True)
    ]
    line = lambda cells: "  ".join(  # noqa: E731
        str(c).ljust(w) if i == 0 else str(c).rjust(w)
        for i, (c, w) in enumerate(zip(cells, widths, strict=True))
    )
    return [section.title, line(section.header), *map(line, section.rows), *section.notes]
