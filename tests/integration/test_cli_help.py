"""Help that fits (issue 48): ``posx --help`` and each command's help wrap where the terminal
does, never where a docstring's source line ended, and ``posx list`` is one line per option,
with one option's description in full from ``posx list GROUP NAME``."""

from __future__ import annotations

import pytest

from posx.cli import app
from posx.cli._app import console

COMMANDS = [c.name or c.callback.__name__ for c in app.registered_commands]


def _early_breaks(text: str) -> list[str]:
    """Lines of rich's help that end before the terminal's or the box's edge although the next
    line's first word would have fit there: a break the source text made, not the width."""
    found = []
    lines = text.splitlines()
    for a, b in zip(lines, lines[1:], strict=False):
        a, b = a.rstrip(), b.rstrip()
        boxed = a.endswith("│") and b.endswith("│") and a.startswith("│") and b.startswith("│")
        if boxed:  # the text may reach up to one space before the right border
            limit, a, b = len(a) - 2, a[:-1].rstrip(), b[:-1].rstrip()
        elif "│" in a or "│" in b or "─" in a or "─" in b or not a.strip() or not b.strip():
            continue
        else:
            limit = 79  # rich keeps a column of margin at 80
        col = len(b) - len(b.lstrip(" │"))
        # a continuation: in a box, text right of the entries' names (column 2); nothing left of
        # it, and a has text in that column
        if boxed and col <= 2 or len(a) <= col or a[col - 1] != " " or a[col] == " ":
            continue
        word = b[col:].split()[0]
        if word.startswith("["):  # Typer's [default: ...], [required]: a line of their own
            continue
        if len(a) + 1 + len(word) <= limit:
            found.append(f"{a.strip(' │')!r} / {word!r}")
    return found


@pytest.mark.parametrize("args", [(), *[(c,) for c in COMMANDS], ("sweep", "status")])
def test_help_at_80_columns_breaks_only_at_the_edge(cli, monkeypatch, args):
    monkeypatch.setenv("COLUMNS", "80")
    out = cli(*args, "--help")
    assert out.returncode == 0, out.stderr
    assert max(len(line) for line in out.stdout.splitlines()) <= 80
    assert _early_breaks(out.stdout) == []


@pytest.mark.parametrize("args", [(), *[(c,) for c in COMMANDS]])
def test_a_flag_shows_no_type(cli, monkeypatch, args):
    """Issue 57.7: `posx --help` showed `--debug <bool>` (and `--help <bool>`, `--dry-run
    <bool>`), as if a flag took a value."""
    monkeypatch.setenv("COLUMNS", "200")
    out = cli(*args, "--help")
    assert out.returncode == 0 and "<bool>" not in out.stdout, out.stdout
    assert args or "--config-dir        DIR" in out.stdout, out.stdout


def test_help_shows_brackets_as_written(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert "[hydra/launcher=slurm]" in cli("eval", "--help").stdout  # not eaten as markup


@pytest.mark.parametrize("width", [60, 80, 120])
def test_list_is_one_line_per_option(cli, monkeypatch, width):
    from posx.config.paths import GROUPS, options

    monkeypatch.setattr(console, "width", width)
    out = cli("list")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert max(len(line) for line in lines) <= width
    for group in GROUPS:
        for name in options(group):
            assert sum(line.split()[:1] == [name] for line in lines) >= 1, (group, name)
    expected = sum(len(options(g)) + 1 for g in GROUPS) + 1  # a title per group, a footnote
    assert len(lines) == expected


def test_list_group_name_shows_the_whole_description(cli, monkeypatch):
    monkeypatch.setattr(console, "width", 80)
    listed = cli("list", "experiment").stdout
    line = next(x for x in listed.splitlines() if x.split()[:1] == ["nope_synthetic"])
    assert line.endswith("…")
    full = cli("list", "experiment", "nope_synthetic")
    assert full.returncode == 0 and "experiment=nope_synthetic" in full.stdout
    text = " ".join(full.stdout.split())
    assert "Kazemnejad et al. 2023" in text and "Budget: 15 runs per seed" in text


def test_list_of_an_unknown_option_names_the_choices(cli):
    out = cli("list", "encoding", "ropee")
    assert out.returncode == 2
    assert out.stderr.startswith("posx: error: encoding has no option 'ropee'; choose from:")
    assert " rope," in out.stderr
