"""Tasks: synthetic reasoning tasks and byte-level text."""

from posx.tasks.base import Batch, Task

__all__ = ["Batch", "Task"]
