"""Synthetic tasks with exact answers, one module per family."""

from posx.tasks.synthetic.copy import CopyTask

__all__ = ["CopyTask"]
