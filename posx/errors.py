"""Errors the CLI turns into one line on stderr and an exit code."""

from __future__ import annotations


def one_line(err: BaseException) -> str:
    """The first non-empty line of an error message."""
    return next((x.strip() for x in str(err).splitlines() if x.strip()), type(err).__name__)


class PosxError(Exception):
    """A failure with a message fit for users; exit code 1 (runtime)."""

    exit_code = 1


class ConfigError(PosxError):
    """A bad input, config value or override; exit code 2 (usage)."""

    exit_code = 2


class Interrupted(PosxError):
    """Ctrl-C stopped training after saving a checkpoint; exit code 130 (as for SIGINT)."""

    exit_code = 130


def damaged_file(path: object, why: str) -> PosxError:
    """The refusal of a run's file that cannot be read: one line naming it, why, and what to
    do."""
    return PosxError(f"{path} is damaged ({why}); restore it from a backup, or move the run aside")


class PosxWarning(UserWarning):
    """Something was skipped but the command goes on (e.g. a damaged table in a report); the
    CLI prints it as one ``posx: warning:`` line."""
