"""Issue 56: LongRoPE factors that ``posx extend`` searched are an output of each replicate (each
seed's parent finds its own), so its identity holds the search's settings, not the factors;
factors set by hand (``posx train``, an extension given them) stay in the identity."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from posx.config.compose import compose
from posx.config.fingerprint import config_fingerprint, identity_config
from tests.conftest import TINY
from tests.integration.test_cli_errors import assert_one_line_error
from tests.unit.claims.test_claims_check import write_claims
from tests.unit.claims.test_claims_lineage import save_run
from tests.unit.config.test_fingerprint import changed

FACTORS = ([1.0, 2.0, 4.0, 4.0], [1.5, 3.0, 3.5, 4.0])


def _extension(factors: list[float], searched: bool, **more) -> dict:
    settings = {
        "extend__parent": "results/runs/base_s0",
        "extend__parent_fingerprint": "abc",
        "extend__length": 64,
        "encoding__scaling": {"type": "longrope", "factor": 4.0, "factors": factors},
        "extend__longrope__searched": searched,
    }
    return changed(**(settings | more))


def test_searched_factors_are_an_output_and_the_search_settings_the_identity():
    one, two = (_extension(f, searched=True) for f in FACTORS)
    assert config_fingerprint(one) == config_fingerprint(two)
    ident = identity_config(one)
    assert "encoding.scaling.factors" not in ident
    assert ident["extend.longrope.population"] == 8 and ident["extend.longrope.seed"] == 0
    other = _extension(FACTORS[0], searched=True, extend__longrope__iterations=9)
    assert config_fingerprint(other) != config_fingerprint(one)


def test_factors_given_to_an_extension_by_hand_stay_in_its_identity():
    one, two = (_extension(f, searched=False) for f in FACTORS)
    assert config_fingerprint(one) != config_fingerprint(two)
    assert "encoding.scaling.factors" in identity_config(one)
    assert not any(k.startswith("extend.longrope") for k in identity_config(one))


def test_hand_set_factors_of_a_trained_run_stay_in_its_identity(tmp_path):
    prints = {
        config_fingerprint(
            compose(
                [
                    *TINY,
                    f"root={tmp_path}",
                    "encoding.scaling.type=longrope",
                    "encoding.scaling.factor=4",
                    f"+encoding.scaling.factors=[{','.join(map(str, f))}]",
                ]
            )  # fmt: skip
        )
        for f in FACTORS
    }
    assert len(prints) == 2


@pytest.mark.parametrize("scaling", [[], ["encoding.scaling.type=longrope",
                                          "+encoding.scaling.factors=[1,2,4,4]"]])  # fmt: skip
def test_posx_train_refuses_the_search_record(cli, tmp_path, scaling):
    proc = cli("train", *TINY, f"root={tmp_path}", "train.steps=1", *scaling,
               "extend.longrope.searched=true")  # fmt: skip
    assert_one_line_error(proc, 2, "extend.longrope.searched is set by posx extend")
    assert not (tmp_path / "runs").exists()


def test_posx_extend_refuses_the_search_record(cli, copy_run, tmp_path):
    parent = copy_run()
    proc = cli("extend", str(parent), "extension=longrope", "extend.longrope.searched=true",
               f"root={tmp_path / 'out'}")  # fmt: skip
    assert_one_line_error(proc, 2, "posx extend sets extend.longrope.searched itself")
    assert not (tmp_path / "out").exists()


def test_hf_longrope_extensions_are_one_configuration_over_seeds():
    """``posx extend hf:`` names the configuration by its settings (the search's among them);
    the factors found go to the model's rope_parameters and run.json, never into it."""
    from posx.pretrained.extend.preview import fingerprint
    from posx.pretrained.extend.settings import parse_settings

    def of(*words: str) -> str:
        return fingerprint("rev", parse_settings(["extension=longrope", *words]))

    assert of("seed=1") == of("seed=2")
    assert of("longrope.iterations=5") != of("longrope.iterations=6")
    assert not any(
        "factor" in k and "longrope" in k for k in parse_settings(["extension=longrope"])
    )


BASES = [2.50, 2.55, 2.60]  # bpb at L=16 of the three bases
SEARCHED = [[1.0, 2.0, 4.0, 4.0], [1.5, 3.0, 3.5, 4.0], [1.0, 1.2, 2.2, 4.0]]  # one per base


def _saved(root: Path, name: str, cfg: dict, info: dict, bpb: float) -> None:
    run = root / "runs" / name
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(cfg)))
    info = {"schema_version": 1, "run": name, "task": "text", "model": "tiny",
            "train_length": 16, "experiment": "lri", "status": "trained", **info}  # fmt: skip
    save_run(run, info, bpb)


def _seed_tree(root: Path) -> None:
    """Three bases and their LongRoPE extensions, each with the factors its base's search
    found (as ``posx extend -m ROOT extension=longrope`` writes them)."""
    for seed in range(3):
        base = changed(seed=seed)
        fp = config_fingerprint(base)
        _saved(
            root,
            f"rope_s{seed}",
            base,
            {"encoding": "rope", "seed": seed, "fingerprint": fp},
            BASES[seed],
        )
        ext = _extension(SEARCHED[seed], searched=True, seed=seed,
                         extend__parent=str(root / "runs" / f"rope_s{seed}"),
                         extend__parent_fingerprint=fp)  # fmt: skip
        parent = {"run": f"rope_s{seed}", "dir": str(root / "runs" / f"rope_s{seed}"),
                  "fingerprint": fp, "label": "rope", "step": 100}  # fmt: skip
        info = {"encoding": "rope+longrope×4+ft@64", "seed": seed, "parent": parent,
                "fingerprint": config_fingerprint(ext)}  # fmt: skip
        _saved(root, f"longrope_s{seed}", ext, info, BASES[seed] - 0.02)


def test_posx_report_and_check_show_the_seeds_as_one_configuration(cli, tmp_path):
    root = tmp_path / "results"
    _seed_tree(root)
    report = cli("report", "--root", str(root), "--metric", "bpb")
    assert report.returncode == 0, report.stderr
    assert "encoding.scaling.factors" not in report.stdout + report.stderr
    (row,) = [line for line in report.stdout.splitlines() if "rope+longrope×4+ft@64" in line]
    assert row.split("│")[2].strip() == "3", report.stdout  # n: 3 seeds, mean ± std
    assert "2.530 ± 0.050" in row, row
    write_claims(tmp_path / "conf", "lri", {"c": ("rope+longrope×4+ft@64 < rope at L=16", "")})
    check = cli("--config-dir", str(tmp_path / "conf"), "check", str(root), "-f", "md")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "rope+longrope×4+ft@64 < rope: 3/3" in check.stdout  # each with its own base
