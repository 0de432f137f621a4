"""Shared fixtures: a tiny config that trains in seconds, and a CLI runner in a subprocess."""

from __future__ import annotations

import copy
import functools
import gc
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# One intra-op thread in every test process and in the `python -m posx` processes tests start
# (they inherit the variable; torch reads it when it is imported). The suite runs one xdist
# worker per core, so a second thread per process only competes for a core: spinning OpenMP
# threads made a tiny run's training ~35% slower on a busy 2-core machine. OMP_NUM_THREADS=N
# in the environment still overrides it.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Before its first CPU compile, Inductor checks that the vector instructions /proc/cpuinfo lists
# really build and load, by compiling a probe program with the C++ compiler: 5.6 s on a 2-core
# machine with an empty cache (CI's every run). The tests take the CPU's word for it; the kernels
# Inductor then builds are compiled and checked by the tests themselves.
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")
# pytest-xdist's workers start with COLUMNS=80 and LINES=24 (a single process has neither): posx
# fits its output to COLUMNS where it is set, so a test would see a terminal under `make test`
# and a pipe alone. Every test starts as a pipe; one that wants a width sets it.
for _size in ("COLUMNS", "LINES"):
    os.environ.pop(_size, None)
# Model-directory hashes are remembered between processes (posx/pretrained/hash_cache.py): the
# tests' go to a folder of their own, never the user's cache, and start empty.
if "POSX_HASH_CACHE" not in os.environ:
    import tempfile

    os.environ["POSX_HASH_CACHE"] = tempfile.mkdtemp(prefix="posx-hash-cache-")

_FROZEN_AT: list[object] = [None]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before each test module: collect the garbage, then freeze what is left (imports, test
    items, session fixtures) out of the cyclic collector's sight. A test worker holds ~300k
    objects, and every full collection walked them all: ~0.4 s each, ~100 s of a suite's run
    (posx's peak-memory measure collects before every evaluated length). Frozen objects are
    still freed by reference counting; the collector still sees everything a test creates."""
    module = getattr(item, "module", None)
    if module is not _FROZEN_AT[0]:
        _FROZEN_AT[0] = module
        gc.collect()
        gc.freeze()


def composed(overrides: list[str]):
    """``compose(overrides)`` of the repo's own configs, composed once per test process: a
    fresh copy each call, so a test may change its own. A compose costs ~0.1-0.3 s, and the
    kernel tests' parametrize lists alone asked for ~180 of them in every xdist worker's
    collection (~20 s of a worker's 2-core minutes), most of them the same twenty."""
    return copy.deepcopy(_composed_once(tuple(overrides)))


@functools.cache
def _composed_once(overrides: tuple[str, ...]):
    from posx.config.compose import compose

    return compose(list(overrides), dirs=[])  # never the user's POSX_CONFIG_PATH


TINY = [
    "task=copy",
    "model.d_model=32",
    "model.n_layers=1",
    "model.n_heads=4",
    "model.d_ff=64",
    "train.length=16",
    "train.steps=30",
    "train.batch_size=8",
    "train.warmup_steps=5",
    "train.log_every=10",
    "train.progress=false",
    "eval.lengths=[16,32]",
    "eval.tokens=256",
]


@pytest.fixture
def tiny_overrides(tmp_path: Path) -> list[str]:
    """Overrides for a ~2 s copy-task run whose results land in ``tmp_path``."""
    return [*TINY, f"root={tmp_path}"]


@pytest.fixture
def tiny_cfg(tmp_path: Path):
    """The composed config of the tiny run (no Hydra app, no files written)."""
    from posx.config.compose import compose

    return compose([*TINY, f"root={tmp_path}"])


def run_posx(
    *args: str, cwd: Path | None = None, check: bool = False
) -> subprocess.CompletedProcess:
    """Runs ``python -m posx ARGS`` as a user would; returns the finished process."""
    env = {**os.environ, "POSX_DEBUG": "0", "HYDRA_FULL_ERROR": "0"}
    proc = subprocess.run(
        [sys.executable, "-m", "posx", *args],
        cwd=cwd or REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"posx {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


@pytest.fixture
def posx():
    return run_posx


class CliResult:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def cli(capsys, monkeypatch):
    """Runs ``posx ARGS`` in this process (fast; for paths that fail before training)."""
    from posx.cli import main

    def run(*args: str) -> CliResult:
        monkeypatch.setattr(sys, "argv", ["posx", *args])
        monkeypatch.setenv("POSX_DEBUG", "0")
        capsys.readouterr()
        try:
            main()
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        out = capsys.readouterr()
        return CliResult(code, out.out, out.err)

    return run


def claims_config(conf: Path, claims: str, paper: str = "extension") -> Path:
    """A config dir with preset ``mine`` (``experiment=mine``) and its claims file: ``claims``
    is the YAML list under ``claims:`` (``  - id: ...``). Returns ``conf``."""
    (conf / "claims").mkdir(parents=True)
    (conf / "experiment").mkdir()
    (conf / "experiment" / "mine.yaml").write_text("# @package _global_\nexperiment_name: mine\n")
    (conf / "claims" / "mine.yaml").write_text(f"paper: {paper}\nclaims:\n{claims}")
    return conf


def markdown_blocks(path: Path, section: str | None = None) -> list[tuple[str, str]]:
    """The fenced code blocks of a Markdown file as ``(info string, code)``, optionally only those
    under the ``## section`` heading (up to the next ``## ``): documentation a test executes."""
    text = path.read_text()
    if section is not None:
        start = text.index(f"\n## {section}\n")
        end = text.find("\n## ", start + 1)
        text = text[start : end if end != -1 else len(text)]
    fences = re.finditer(r"^```([^\n]*)\n(.*?)^```$", text, re.M | re.S)
    return [(m[1].strip(), m[2]) for m in fences]


@pytest.fixture
def doc_blocks():
    return markdown_blocks


def wandb_records(path: Path) -> list:
    """Every record of a W&B run file (``run-<id>.wandb``), parsed with W&B's own protobuf
    schema. The file is a LevelDB-style log (a 7-byte ``:W&B`` header, then 32 KiB blocks of
    chunks with a 7-byte header: CRC32, length, type FULL/FIRST/MIDDLE/LAST); wandb >= 0.19
    writes it from its Go core and ships no Python reader, so the framing is read here."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", path
    block, pos, pending, out = 32768, 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # too little room for a chunk header: padding up to the next block
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 2):  # FULL, FIRST
            pending = chunk
        else:  # MIDDLE, LAST
            pending += chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            out.append(record)
    return out


@pytest.fixture
def read_wandb():
    """Reads a finished W&B run file (:func:`wandb_records`). W&B's core writes it a moment
    after ``run.finish()`` returns, so this waits (up to 60 s) for the run's ``exit`` record."""
    pytest.importorskip("wandb", reason="logger=wandb needs the wandb extra")

    def read(path: Path) -> list:
        deadline = time.time() + 60
        while True:
            records = wandb_records(path)
            if any(r.WhichOneof("record_type") == "exit" for r in records):
                return records
            if time.time() > deadline:
                raise AssertionError(f"{path} has no exit record after 60 s")
            time.sleep(0.2)

    return read


def run_in_process(*args: str) -> CliResult:
    """``posx ARGS`` through ``posx.cli.main`` in this process, usable from fixtures of any
    scope (the ``cli`` fixture needs pytest's function-scoped capture)."""
    import contextlib
    import io

    from posx.cli import main

    argv, out, err = sys.argv, io.StringIO(), io.StringIO()
    sys.argv = ["posx", *args]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        sys.argv = argv
    return CliResult(code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """One finished tiny run (checkpoint, run.json, eval.csv), trained once per session in
    this process; tests change copies of it (``copy_run``), never the run itself."""
    root = tmp_path_factory.mktemp("tiny_run")
    result = run_in_process("train", *TINY, "train.steps=10", f"root={root}")
    runs = [p.parent for p in root.rglob("run.json")]
    assert result.returncode == 0 and len(runs) == 1, result.stderr
    return runs[0]


@pytest.fixture
def copy_run(tiny_run: Path, tmp_path: Path):
    """``copy_run(name)``: a fresh copy of ``tiny_run`` at ``tmp_path/runs/name``."""
    import shutil

    def copy(name: str = "run") -> Path:
        return Path(shutil.copytree(tiny_run, tmp_path / "runs" / name, symlinks=True))

    return copy


@pytest.fixture(scope="session")
def posx_in_process():
    """:func:`run_in_process`, for fixtures wider than one test."""
    return run_in_process


@pytest.fixture(scope="session")
def tiny_args() -> list[str]:
    """The tiny run's overrides without ``root`` (for fixtures wider than one test)."""
    return list(TINY)
