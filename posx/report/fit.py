"""Terminal tables that fit the width they are printed at, without cutting a number.

Rich fits a table that is too wide by shrinking its columns and cutting their cells (``0.5…``,
``L=1…``): a cut number reads as another number. Here the value columns never wrap and never
shrink below their widest cell or header; only the row labels fold. When the value columns do
not fit beside the labels, they are split into groups, each its own table with the labels (and
the fixed columns, such as ``n``) repeated, in order, and a line saying which part it is.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from rich.console import Console, ConsoleOptions, JustifyMethod
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

# Rich's default table: a cell's padding (one space each side) and the border right of it.
PER_COLUMN = 3
# The row labels fold down to this width (or to their own, if narrower) before a table splits.
LABEL_MIN = 16


def label_pieces(text: str) -> list[str]:
    """A label's unbreakable pieces, each with what follows it: a label breaks after ``+``
    and at spaces outside parentheses (``rope+`` ``yarn×4+`` ``ft@256 `` ``· ``
    ``L_train=256``; ``(not learned)`` whole), so no line ends inside a part (``ft@2`` /
    ``56`` would read as another label)."""
    pieces, current, depth = [], "", 0
    for i, char in enumerate(text):
        current += char
        depth += (char == "(") - (char == ")")
        after = text[i + 1 : i + 2]
        if depth <= 0 and (char == "+" or (char == " " and after not in ("", " "))):
            pieces.append(current)
            current = ""
    return [*pieces, current] if current else pieces


def fold_label(label: Text, room: int) -> Text:
    """``label`` in lines of at most ``room`` cells, broken between its pieces
    (:func:`label_pieces`; a piece wider than ``room`` alone is cut by characters); styles
    are kept."""
    if text_width(label) <= room:
        return label
    cuts, used, at = [], 0, 0
    for piece in label_pieces(label.plain):
        size = Text(piece).cell_len
        if used and used + len(piece.rstrip()) > room:
            cuts.append(at)
            used = 0
        while used == 0 and size > room:  # one piece wider than the line: by characters
            at += room
            cuts.append(at)
            piece, size = piece[room:], size - room
        used += size
        at += len(piece)
    lines = label.divide(cuts)
    for line in lines:
        line.rstrip()
    return Text("\n").join(line for line in lines if line.plain)


def text_width(text: Text | str) -> int:
    """The widest line of ``text``, in terminal cells."""
    plain = text.plain if isinstance(text, Text) else text
    return max((Text(line).cell_len for line in plain.split("\n")), default=0)


@dataclass
class Column:
    """A column of a fitted table: its header, its cells (one per row) and how they align."""

    header: str
    cells: list[Text]
    justify: JustifyMethod = "right"

    @property
    def width(self) -> int:
        """What the column needs: its widest cell or its header."""
        return max([text_width(self.header), *(text_width(c) for c in self.cells)])


@dataclass
class FittedTable:
    """A table of row labels, fixed columns and value columns that fits its width when printed
    (see the module's docstring). Printed, it is one table, or several with the value columns
    in groups.

    Attributes:
        label: The row labels' column (it folds; never split).
        fixed: Columns repeated in every part (``n``, a rank's MRR).
        values: The columns split into groups where they do not fit.
        caption: Under the last part (notes, remarks).
        row_styles: A style per row (``dim`` for a row not learned), or None.
    """

    label: Column
    fixed: list[Column]
    values: list[Column]
    caption: str | None = None
    row_styles: list[str | None] = field(default_factory=list)

    def label_min(self) -> int:
        """How narrow the labels may fold: :data:`LABEL_MIN`, or a label's longest piece
        (:func:`label_pieces`) where it is wider, or the labels' own width where narrower."""
        pieces = [len(p.rstrip()) for c in self.label.cells for p in label_pieces(c.plain)]
        return min(self.label.width, max(LABEL_MIN, *pieces, 0))

    def groups(self, width: int) -> list[list[int]]:
        """The value columns' indices in groups that fit ``width`` beside the labels folded to
        :meth:`label_min` and the fixed columns; at least one column per group."""
        base = 1 + self.label_min() + PER_COLUMN
        base += sum(c.width + PER_COLUMN for c in self.fixed)
        groups: list[list[int]] = []
        current: list[int] = []
        used = base
        for i, column in enumerate(self.values):
            need = column.width + PER_COLUMN
            if current and used + need > width:
                groups.append(current)
                current, used = [], base
            current.append(i)
            used += need
        return [*groups, current] if current or not groups else groups

    def table(self, part: Sequence[int], caption: str | None, width: int) -> Table:
        """The rich table of the value columns ``part`` (with the labels and fixed columns) at
        ``width``: labels wider than the room left are folded between their pieces
        (:func:`fold_label`), never inside one."""
        table = Table(caption=caption, caption_justify="left")
        columns = [*self.fixed, *(self.values[i] for i in part)]
        room = width - 1 - PER_COLUMN - sum(c.width + PER_COLUMN for c in columns)
        room = max(room, self.label_min())
        labels = [fold_label(c, room) for c in self.label.cells]
        table.add_column(self.label.header, style="bold", no_wrap=True,
                         min_width=max(map(text_width, labels), default=1))  # fmt: skip
        for column in columns:
            table.add_column(column.header, justify=column.justify, no_wrap=True,
                             min_width=column.width)  # fmt: skip
        for r, label in enumerate(labels):
            style = self.row_styles[r] if r < len(self.row_styles) else None
            table.add_row(label, *(c.cells[r] for c in columns), style=style)
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[object]:
        parts = self.groups(options.max_width)
        for k, part in enumerate(parts, 1):
            last = k == len(parts)
            if len(parts) > 1:
                first, end = self.values[part[0]].header, self.values[part[-1]].header
                span = first if len(part) == 1 else f"{first} to {end}"
                yield Text(f"({k} of {len(parts)}: {span})", style="dim")
            yield self.table(part, self.caption if last else None, options.max_width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(1, options.max_width)
