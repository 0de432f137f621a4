"""Every (encoding × method) pair through ``posx extend``, the command a user types: either an
extension that keeps its parent's encoding class, or one line saying why the method does not
fit that encoding (a method that needs RoPE's scaling is refused for ALiBi, never run under
RoPE)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from posx.config.compose import CONFIG_DIR
from tests.conftest import TINY, run_in_process

ENCODINGS = sorted(p.stem for p in (CONFIG_DIR / "encoding").glob("*.yaml"))
METHODS = sorted(p.stem for p in (CONFIG_DIR / "extension").glob("*.yaml"))
BASE = [*TINY, "train.length=8", "train.steps=2", "train.warmup_steps=1", "eval.lengths=[8]",
        "eval.tokens=32"]  # fmt: skip
# one step, evaluated at the base's length only; the learned table copied to the new length
FT = ["extend.steps=1", "extend.warmup_steps=1", "eval.lengths=[8]", "extend.resize=copy"]


def _target(run: Path) -> str:
    return yaml.safe_load((run / ".hydra" / "config.yaml").read_text())["encoding"]["_target_"]


def _runs(root: Path) -> set[Path]:
    return {p.parent for p in root.rglob("run.json")}


# what an encoding needs to train at all (it declares it: Abacus indexes by a digit's place)
NEEDS = {"abacus": ["task=arithmetic", "positions=abacus", "positions.max_offset=4"]}


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    """``bases(encoding)``: one tiny base of that encoding yaml, trained once per module."""
    made: dict[str, Path] = {}

    def base(encoding: str) -> Path:
        if encoding not in made:
            root = tmp_path_factory.mktemp(encoding)
            args = [*BASE, f"encoding={encoding}", *NEEDS.get(encoding, []), f"root={root}"]
            result = run_in_process("train", *args)
            assert result.returncode == 0, result.stderr
            (made[encoding],) = _runs(root)
        return made[encoding]

    return base


def _declares_scaling(encoding: str) -> bool:
    return "scaling" in yaml.safe_load((CONFIG_DIR / "encoding" / f"{encoding}.yaml").read_text())


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_every_method_extends_keeping_the_class_or_is_refused(cli, bases, encoding):
    base = bases(encoding)
    root = base.parent.parent
    before = _runs(root)
    result = cli("extend", "-m", str(base), f"extension={','.join(METHODS)}", *FT)
    assert result.returncode == 0, result.stderr
    skipped = {
        line.split("with extension=")[1].split(":")[0]: line
        for line in result.stderr.splitlines()
        if line.startswith("posx: warning: skipped ")
    }
    new = _runs(root) - before
    assert len(new) + len(skipped) == len(METHODS), (sorted(skipped), result.stderr)
    for run in new:  # an extension keeps its parent's encoding class, under a short label
        info = json.loads((run / "run.json").read_text())
        assert _target(run) == _target(base), info["encoding"]
        assert info["encoding"].startswith(encoding) and len(info["encoding"]) <= 40
    scaling = {m: line for m, line in skipped.items()
               if m in ("llama3", "longrope", "ntk", "pi", "yarn")}  # fmt: skip
    for line in scaling.values():  # one line: why, and what fits instead
        assert "has no setting 'scaling'" in line and "methods that fit" in line, line
    assert _declares_scaling(encoding) == (not scaling)
    lora = skipped.pop("longlora", "")  # LoRA adapters of a transformers model: never a posx run
    assert "trains LoRA adapters of a transformers model" in lora, lora
    for method, line in skipped.items() - scaling.items():  # PoSE's positions the encoding
        assert method == "pose" and "positions=pose" in line, line  # cannot take (Abacus, learned)


@pytest.mark.parametrize("encoding", ["alibi", "t5", "learned"])
def test_a_method_that_does_not_fit_is_one_line_exit_2_nothing_written(cli, bases, encoding):
    base = bases(encoding)
    before = _runs(base.parent.parent)
    result = cli("extend", str(base), "extension=yarn", *FT)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "has no setting 'scaling'" in lines[0] and "extension=yarn" in lines[0]
    assert "methods that fit" in lines[0] and "plain" in lines[0]
    assert _runs(base.parent.parent) == before
