"""Through the real CLI: a run's directory and run.json carry the same label; user config dirs
are added with `posx --config-dir` or Hydra's own `--config-dir` after `train`, and `posx resume`
remembers them. (About 4 s per training run in process, hence slow.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

QUICK = [
    "task=copy",
    "model.d_model=16",
    "model.n_layers=1",
    "model.n_heads=2",
    "model.d_ff=32",
    "train.length=8",
    "train.steps=2",
    "train.batch_size=2",
    "train.warmup_steps=1",
    "train.progress=false",
    "train.eval_at_end=false",
]
pytestmark = pytest.mark.slow


def trained(cli, root: Path, *args: str) -> tuple[Path, dict]:
    proc = cli(*args, f"root={root}", *QUICK)
    assert proc.returncode == 0, proc.stderr
    (run,) = [p.parent for p in root.rglob("run.json")]
    return run, json.loads((run / "run.json").read_text())


def test_command_line_target_is_labelled_by_its_class_not_the_option_it_replaced(cli, tmp_path):
    run, info = trained(
        cli,
        tmp_path,
        "train",
        "encoding=nope",
        "encoding._target_=posx.encodings.alibi.ALiBi",
        "+encoding._partial_=true",
    )
    assert run.name.startswith("copy_ALiBi_L8_s0_"), run.name
    assert info["encoding"] == "ALiBi"


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    path = tmp_path / "conf" / "encoding" / "halfbias.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(
        "# ALiBi under my name\n_target_: posx.encodings.alibi.ALiBi\n_partial_: true\n"
    )
    return tmp_path / "conf"


@pytest.mark.parametrize("where", ["posx", "hydra"])
def test_user_config_dir_option_trains_under_its_own_name(cli, tmp_path, conf, where):
    args = ["--config-dir", str(conf), "train"] if where == "posx" else ["train", "-cd", str(conf)]
    run, info = trained(cli, tmp_path / "results", *args, "encoding=halfbias")
    assert run.name.startswith("copy_halfbias_L8_s0_") and info["encoding"] == "halfbias"


def test_resume_remembers_the_users_config_dir(cli, tmp_path, conf):
    run, _ = trained(
        cli, tmp_path / "results", "--config-dir", str(conf), "train", "encoding=halfbias"
    )
    proc = cli("resume", str(run))  # no --config-dir: the run's record has it
    assert proc.returncode == 0, proc.stderr
    assert json.loads((run / "run.json").read_text())["status"] == "trained"
