"""Errors the CLI turns into one line on stderr and an exit code."""

from __future__ import annotations


class PosxError(Exception):
    """A failure with a message fit for users; exit code 1 (runtime)."""

    exit_code = 1


class ConfigError(PosxError):
    """A bad input, config value or override; exit code 2 (usage)."""

    exit_code = 2
