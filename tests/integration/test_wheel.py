"""posx as a user installs it: a wheel (configs inside) in a fresh virtual environment, used from
a directory that has nothing to do with the source tree; then the extending tutorial
(docs/extending.md) in real bash against that installation.

No network: the wheel is built with this environment's setuptools (--no-build-isolation) and
installed with --no-deps; the new environment reaches this one's torch, Hydra, ... through a
.pth file (``venv --system-site-packages`` would share the base interpreter's, not this venv's).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # builds, installs, trains and evaluates in subprocesses: ~1 min

QUICK = [
    "task=copy",
    "encoding=alibi",
    "model.d_model=32",
    "model.n_layers=1",
    "train.length=16",
    "train.steps=5",
    "train.progress=false",
    "eval.lengths=[16,32]",
    "eval.tokens=512",
]


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (cmd, proc.stdout[-2000:], proc.stderr[-4000:])
    return proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A venv with the posx wheel installed, and the environment to run its ``posx`` with."""
    tmp = tmp_path_factory.mktemp("wheel")
    # Build from a copy, so the source tree gets no build/ or egg-info directories.
    src = tmp / "src"
    for name in ("posx", "configs"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    pip = [sys.executable, "-m", "pip"]
    run([*pip, "wheel", ".", "--no-deps", "--no-build-isolation", "-w", str(tmp / "dist")], src)
    (wheel,) = (tmp / "dist").glob("posx-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {p.relative_to(REPO).as_posix() for p in (REPO / "configs").rglob("*.yaml")}
    assert {f"posx/{p}" for p in shipped} <= names, "configs missing from the wheel"
    kernels = {p.relative_to(REPO).as_posix() for p in (REPO / "posx").rglob("*.c")}
    assert kernels and kernels <= names, "C kernel sources missing from the wheel"
    assert not any(n.startswith(("configs/", "tests/")) for n in names)

    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp)
    python = venv / "bin" / "python"
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = run([str(python), "-c", code], tmp)
    Path(purelib.strip(), "shared.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run([*pip, "--python", str(python), "install", "--no-index", "--no-deps", str(wheel)], tmp)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "POSX_"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return venv, env


def test_installed_wheel_trains_evaluates_and_reports_from_anywhere(installed, tmp_path):
    venv, env = installed
    code = "import posx.config.paths as c; print(c.CONFIG_DIR)"
    where = run([str(venv / "bin" / "python"), "-c", code], tmp_path, env)
    assert Path(where.strip()).is_relative_to(venv) and where.strip().endswith("posx/configs")

    posx = str(venv / "bin" / "posx")
    listed = run([posx, "list", "encoding"], tmp_path, env)
    assert "alibi" in listed
    assert "(Press et al." in run([posx, "list", "encoding", "alibi"], tmp_path, env)
    run([posx, "train", *QUICK], tmp_path, env)
    (run_dir,) = (tmp_path / "results" / "runs").iterdir()
    assert run_dir.name.startswith("copy_alibi_L16_s0_")
    evaluated = run([posx, "eval", "--lengths", "16,32,64"], tmp_path, env)
    assert "L=64" in evaluated
    report = run([posx, "report", "--format", "md", "--metric", "loss"], tmp_path, env)
    assert "| alibi |" in report and "L=64" in report


def test_extending_tutorial_in_bash_against_the_wheel(installed, doc_blocks, tmp_path):
    _, env = installed
    blocks = doc_blocks(REPO / "docs" / "extending.md")
    for info, code in blocks:
        words = dict(w.split("=", 1) for w in info.split()[1:] if "=" in w)
        if "file" in words:
            (tmp_path / words["file"]).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / words["file"]).write_text(code)
    script = "set -euo pipefail\n" + "\n".join(code for info, code in blocks if info == "bash")
    out = run(["bash", "-c", script], tmp_path, {**env, "COLUMNS": "240"})
    (run_dir,) = (tmp_path / "myproject" / "results" / "runs").iterdir()
    assert run_dir.name.startswith("recall_first_log_bias_L16_s0_")
    assert "(mypkg)" in out and "log_bias" in out.split("Log-distance")[-1]
