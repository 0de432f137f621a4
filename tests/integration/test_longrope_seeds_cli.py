"""Issue 56: the seeds of one LongRoPE extension are one configuration. Each seed's parent finds
its own factors, an output of the run (as its weights are): ``posx report`` shows one row of
n=3 and ``posx check`` pairs each extension with its own base, while factors set by hand stay
in a run's identity."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.conftest import TINY
from tests.integration.test_longrope_runs_cli import SEARCH
from tests.unit.claims.test_claims_check import write_claims

LABEL = "rope+longrope×4+ft@64"


def _extensions(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("run.json") if "longrope" in p.parent.name)


@pytest.mark.slow
def test_three_seeds_with_their_own_factors_are_one_configuration(cli, tmp_path):
    root = tmp_path / "results"
    for seed in (1, 2, 3):
        done = cli("train", *TINY, "train.steps=10", f"seed={seed}", "experiment_name=lri",
                   "eval.lengths=[64]", f"root={root}")  # fmt: skip
        assert done.returncode == 0, done.stderr
    done = cli("extend", str(root), *SEARCH, f"root={root}")
    assert done.returncode == 0, done.stderr
    runs = _extensions(root)
    assert len(runs) == 3
    factors = [list(OmegaConf.load(r / ".hydra" / "config.yaml").encoding.scaling.factors)
               for r in runs]  # fmt: skip
    # the point of the test: each seed's search found factors of its own
    assert len({json.dumps(f) for f in factors}) == 3, factors
    for run, found in zip(runs, factors, strict=True):  # recorded where a reader looks
        info = json.loads((run / "run.json").read_text())
        assert info["extension"]["encoding"]["scaling"]["factors"] == found
    assert len({json.loads((r / "run.json").read_text())["fingerprint"] for r in runs}) == 1

    report = cli("report", "--root", str(root), "--metric", "loss")
    assert report.returncode == 0, report.stderr
    text = report.stdout + report.stderr
    assert "encoding.scaling.factors" not in text  # no "rows differ in settings" note
    (row,) = [line for line in report.stdout.splitlines() if LABEL in line]
    assert row.split("│")[2].strip() == "3", report.stdout  # n: one configuration of 3 seeds
    assert "±" in row

    conf = tmp_path / "conf"
    write_claims(conf, "lri", {"over_base": (f"{LABEL} < rope at L=64 by loss", "")})
    check = cli("--config-dir", str(conf), "check", str(root), "-f", "md")
    # judged over the 3 seeds, each extension against its own base
    assert re.search(rf"{re.escape(LABEL)} < rope: [0-3]/3", check.stdout), (
        check.stdout + check.stderr
    )


@pytest.mark.slow
def test_an_extension_of_a_searched_extension_does_not_inherit_its_factors(cli, copy_run, tmp_path):
    root = tmp_path / "out"
    done = cli("extend", str(copy_run()), *SEARCH, f"root={root}")
    assert done.returncode == 0, done.stderr
    (searched,) = _extensions(root)
    for method, more in (("yarn", []), ("longrope", SEARCH[1:])):
        out = tmp_path / method
        done = cli("extend", str(searched), f"extension={method}", "extend.steps=2",
                   "extend.warmup_steps=1", *more, "eval.lengths=[256]", f"root={out}")  # fmt: skip
        assert done.returncode == 0, done.stderr
        (child,) = [p.parent for p in out.rglob("run.json")]
        cfg = OmegaConf.load(child / ".hydra" / "config.yaml")
        # yarn has no factors; LongRoPE searches its own at the child's length
        assert bool(cfg.encoding.scaling.get("factors")) == (method == "longrope")
        assert cfg.extend.longrope.searched == (method == "longrope")
        assert ("longrope search iteration" in done.stderr) == (method == "longrope")
