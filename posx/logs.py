"""Where posx's messages go during ``posx train``: the terminal and the run's ``posx.log``.

Hydra configures logging for each job from ``configs/hydra/job_logging/posx.yaml``: messages
on stdout, warnings and errors on stderr, and everything, timestamped, in
``<run dir>/posx.log``. These filters make that split. A record logged with
``extra={"console": False}`` goes to the log file only (training progress while a live progress
bar already shows it on the terminal).
"""

from __future__ import annotations

import logging


def on_console(record: logging.LogRecord) -> bool:
    """Whether a record is meant for the terminal as well as the log file."""
    return bool(getattr(record, "console", True))


class StdoutFilter(logging.Filter):
    """Messages below WARNING that are meant for the terminal."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.WARNING and on_console(record)


class StderrFilter(logging.Filter):
    """Warnings and errors."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING and on_console(record)
