"""Saved runs: a run directory opened once, into one object the commands consult.

:class:`SavedRun` holds what the directory records and answers what ``posx eval``, ``resume``,
``extend``, ``runs``, ``report``, ``check`` and the Python API ask of it; :class:`RunKind` says
what made it.
"""

from posx.saved.run import RunKind, SavedRun

__all__ = ["RunKind", "SavedRun"]
