"""Which process is training a run: recorded in ``run.json`` while it trains, and asked before
a second process would touch the run (``posx extend`` and ``posx resume`` of a run that is still
training).

A process is known by its host, its id and, where Linux's ``/proc`` says, its start time, so a
process id reused after the training process died is not taken for it.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22), or
    None where there is no such file; a zombie (``Z``: dead, not yet reaped) has none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (command) "
    return None if fields[0] == "Z" else fields[19]


def this_process() -> dict[str, Any]:
    """What ``run.json`` records of the process that trains the run."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "start": _start_time(os.getpid())}


def running_here(info: dict[str, Any]) -> int | None:
    """The id of the process on this machine that is still training the run ``info`` (its
    ``run.json``) describes; None when none is known to be (stopped, on another machine, not
    recorded, or this process itself)."""
    process = info.get("process") if info.get("status") == "training" else None
    if not isinstance(process, dict) or not isinstance(process.get("pid"), int):
        return None
    pid = process["pid"]
    if process.get("host") != socket.gethostname() or pid == os.getpid():
        return None  # this process trained it and has returned: not a second one
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # someone else's process: alive
        pass
    start = _start_time(pid)
    if start is None and Path("/proc").is_dir():  # a zombie: it has stopped
        return None
    recorded = process.get("start")
    if recorded is not None and start is not None and start != recorded:  # the id was reused
        return None
    return pid


def training_process(info: dict[str, Any]) -> str | None:
    """Who is still training the run ``info`` (its ``run.json``) describes, in words
    (``process 4242 on this machine``); None when it is known to have stopped.

    A run whose ``run.json`` says ``training`` without a process this machine can ask (another
    host, or a posx that did not record it) is taken to be training on the record's word.
    """
    if info.get("status") != "training":
        return None
    pid = running_here(info)
    if pid is not None:
        return f"process {pid} on this machine"
    process = info.get("process")
    if not isinstance(process, dict):
        return "by its run.json, which names no process"
    host = str(process.get("host") or "")
    if host and host != socket.gethostname():
        return f"process {process.get('pid')} on {host}, by its run.json"
    return None
