"""Reports group runs by their whole configuration: fingerprints, duplicates, --by and --where
on any config key, and notes on settings a table mixes. Trees are written by hand: each run has
``.hydra/config.yaml``, ``run.json`` and ``eval.csv`` as posx writes them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from posx.config.fingerprint import config_fingerprint
from posx.errors import ConfigError
from posx.report import make_report, render
from posx.report.data import load_evals

ENCODINGS = {"rope": "posx.encodings.rope.RoPE", "alibi": "posx.encodings.alibi.ALiBi"}


def config(encoding: str = "rope", seed: int = 0, **changes) -> dict:
    """A run's resolved config; ``changes`` are dotted keys, e.g. ``{"train.steps": 300}``."""
    cfg = OmegaConf.create(
        {
            "model": {"d_model": 32, "n_layers": 1, "n_heads": 4, "d_ff": 64},
            "train": {"length": 8, "steps": 1000, "batch_size": 8, "device": "auto"},
            "eval": {"lengths": [8, 16], "tokens": 256},
            "encoding": {"_target_": ENCODINGS[encoding], "_partial_": True},
            "task": {"_target_": "posx.tasks.synthetic.copy.CopyTask", "num_symbols": 16},
            "positions": {"_target_": "posx.positions.DefaultPositions"},
            "seed": seed,
            "root": "results",
        }
    )
    for key, value in changes.items():
        OmegaConf.update(cfg, key, value)
    return OmegaConf.to_container(cfg)


def write_run(
    root: Path,
    name: str,
    cfg: dict,
    losses: dict[int, float],
    age: float = 0.0,
    fingerprint: bool = False,
) -> Path:
    """A run directory under ``root/runs``; ``age`` seconds old (run.json's time)."""
    run = root / "runs" / name
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(cfg)))
    enc = next(k for k, v in ENCODINGS.items() if v == cfg["encoding"]["_target_"])
    ident = {"schema_version": 1, "run": name, "encoding": enc, "task": "copy", "model": "tiny",
             "seed": cfg["seed"], "train_length": cfg["train"]["length"]}  # fmt: skip
    (run / "run.json").write_text(json.dumps(ident))
    rows = []
    for length, loss in losses.items():
        protocol = {"overrides": "", "eval_length": length, "mode": "full", "window": length,
                    "stride": length, "status": "ok", "reason": ""}  # fmt: skip
        rows.append({**ident, **protocol, "loss": loss, "acc": 1 / (1 + loss)})
        if fingerprint:
            rows[-1]["fingerprint"] = config_fingerprint(cfg)
    pd.DataFrame(rows).to_csv(run / "eval.csv", index=False)
    stamp = 1_700_000_000 - age
    os.utime(run / "run.json", (stamp, stamp))
    return run


def test_issue_reproduction_two_step_counts_one_seed_are_two_rows(tmp_path):
    # Issue 16: rope trained for 1000 and for 300 steps, same seed, one root. `--by seed` used
    # to show one cell `rope · seed=0 | n=2`: two different models averaged as two seeds.
    write_run(tmp_path, "rope_1000", config(**{"train.steps": 1000}), {8: 1.0, 16: 2.0})
    write_run(tmp_path, "rope_300", config(**{"train.steps": 300}), {8: 1.5, 16: 3.5})
    report = make_report(tmp_path, metric="loss", by=["seed"])
    (table,) = report.tables
    assert sorted(table.rows) == [
        "rope · seed=0 · train.steps=1000",
        "rope · seed=0 · train.steps=300",
    ]
    assert all(n == 1 for n in table.n.values())
    assert table.cell("rope · seed=0 · train.steps=300", 16).mean == 3.5
    assert table.cell("rope · seed=0 · train.steps=1000", 16).mean == 2.0
    assert table.remarks and "train.steps (300, 1000)" in table.remarks[0]
    assert "train.steps (300, 1000)" in render(report, "md")
    assert not report.warnings  # different configurations are no duplicates


def test_n_counts_distinct_seeds_of_one_configuration(tmp_path):
    for seed in (0, 1, 2):
        write_run(tmp_path, f"rope_s{seed}", config(seed=seed), {8: 1.0 + seed, 16: 2.0})
    (table,) = make_report(tmp_path, metric="loss").tables
    assert table.rows == ["rope"] and table.n["rope"] == 3 and not table.remarks
    assert table.cell("rope", 8).mean == pytest.approx(2.0)


def test_a_duplicate_run_is_flagged_and_never_averaged(tmp_path):
    write_run(tmp_path, "rope_old", config(), {8: 9.0, 16: 9.0}, age=100)
    write_run(tmp_path, "rope_new", config(), {8: 1.0, 16: 2.0}, age=0)
    write_run(tmp_path, "rope_s1", config(seed=1), {8: 3.0, 16: 4.0})
    report = make_report(tmp_path, metric="loss")
    (table,) = report.tables
    assert table.n["rope"] == 2  # seeds 0 and 1, not three runs
    assert table.cell("rope", 8).mean == pytest.approx(2.0)  # (1 + 3) / 2: the old 9 is out
    (warning,) = report.warnings
    assert "runs/rope_old and runs/rope_new" in warning and "showing only the newer" in warning


def test_old_runs_get_their_fingerprint_from_the_saved_config(tmp_path):
    cfg = config(**{"train.steps": 300})
    write_run(tmp_path, "old", cfg, {8: 1.0})  # an eval.csv written before fingerprints
    write_run(tmp_path, "new", config(seed=1, **{"train.steps": 300}), {8: 2.0}, fingerprint=True)
    frame = load_evals(tmp_path).set_index("run_dir")
    assert frame.loc["runs/old", "fingerprint"] == config_fingerprint(cfg)
    assert frame.loc["runs/old", "fingerprint"] == frame.loc["runs/new", "fingerprint"]
    assert frame.loc["runs/old", "config:train.steps"] == 300
    (table,) = make_report(tmp_path, metric="loss").tables
    assert table.n["rope"] == 2  # one configuration, two seeds


def test_by_and_where_accept_any_config_key(tmp_path):
    for steps in (300, 1000):
        for d in (32, 64):
            cfg = config(**{"train.steps": steps, "model.d_model": d})
            write_run(tmp_path, f"rope_{steps}_{d}", cfg, {8: steps / 1000 + d / 100, 16: 3.0})
    report = make_report(tmp_path, metric="loss", by=["train.steps"], where=["model.d_model=64"])
    (table,) = report.tables
    assert sorted(table.rows) == ["rope · train.steps=1000", "rope · train.steps=300"]
    assert table.cell("rope · train.steps=300", 8).mean == pytest.approx(0.3 + 0.64)
    assert not table.remarks  # everything that differs is grouped by or filtered
    both = make_report(tmp_path, metric="loss", by=["train.steps", "model.d_model"]).tables[0]
    assert len(both.rows) == 4 and "rope · train.steps=300 · model.d_model=32" in both.rows
    with pytest.raises(ConfigError, match="unknown --by 'train.stpes'"):
        make_report(tmp_path, by=["train.stpes"])
    with pytest.raises(ConfigError, match="unknown --where key 'model.width'"):
        make_report(tmp_path, where=["model.width=64"])
    with pytest.raises(ConfigError, match=r"--where model.d_model=128; it has: 32, 64"):
        make_report(tmp_path, where=["model.d_model=128"])
    with pytest.raises(ConfigError, match="--where needs KEY=VALUE"):
        make_report(tmp_path, where=["model.d_model"])


def test_a_table_says_which_settings_its_rows_differ_in(tmp_path):
    # Different encodings trained for different step counts: the labels do not collide, but
    # the comparison is unfair, and the note says so. Encoding keys differ by design: no note.
    write_run(tmp_path, "rope", config("rope", **{"train.steps": 1000}), {8: 1.0})
    write_run(tmp_path, "alibi", config("alibi", **{"train.steps": 300}), {8: 1.2})
    (table,) = make_report(tmp_path, metric="loss").tables
    assert sorted(table.rows) == ["alibi", "rope"]
    (remark,) = table.remarks
    assert "train.steps (300, 1000)" in remark and "encoding" not in remark
    write_run(tmp_path, "alibi_1000", config("alibi", seed=1, **{"train.steps": 1000}), {8: 1.1})
    fair = make_report(tmp_path, metric="loss", where=["train.steps=1000"]).tables[0]
    assert not fair.remarks and fair.n == {"alibi": 1, "rope": 1}


def test_bookkeeping_keys_do_not_split_a_configuration(tmp_path):
    # Where a run ran is not the experiment, once its precision is the same (with
    # precision=auto a CUDA run is bf16 and a CPU run fp32: two configurations, issue 30).
    fp32 = {"train.precision": "fp32", "eval.precision": "fp32"}
    write_run(tmp_path, "a", config(seed=0, **{"train.device": "cpu", **fp32}), {8: 1.0})
    cuda = {"train.device": "cuda", "eval.lengths": [8], **fp32}
    write_run(tmp_path, "b", config(seed=1, **cuda), {8: 2.0})
    (table,) = make_report(tmp_path, metric="loss").tables
    assert table.rows == ["rope"] and table.n["rope"] == 2 and not table.remarks


def test_two_sliding_protocols_of_one_run_are_two_rows(tmp_path):
    run = write_run(tmp_path, "rope", config(), {8: 1.0})
    rows = pd.read_csv(run / "eval.csv")
    sliding = [
        rows.iloc[0].to_dict()
        | {
            "mode": "sliding",
            "eval_length": 16,
            "window": 8,
            "stride": stride,
            "loss": loss,
        }  # fmt: skip
        for stride, loss in ((4, 1.5), (8, 1.9))
    ]
    pd.concat([rows, pd.DataFrame(sliding)]).to_csv(run / "eval.csv", index=False)
    report = make_report(tmp_path, metric="loss", modes=["sliding"])
    (table,) = report.tables
    assert sorted(table.rows) == ["rope · window=8 stride=4", "rope · window=8 stride=8"]
    assert table.cell("rope · window=8 stride=4", 16).mean == 1.5 and table.n == {
        "rope · window=8 stride=4": 1,
        "rope · window=8 stride=8": 1,
    }


def test_without_a_saved_config_the_stored_fingerprint_tells_runs_apart(tmp_path):
    for steps, loss in ((300, 2.0), (1000, 1.0)):
        run = write_run(tmp_path, f"rope_{steps}", config(**{"train.steps": steps}), {8: loss},
                        fingerprint=True)  # fmt: skip
        (run / ".hydra" / "config.yaml").unlink()
    frame = load_evals(tmp_path).set_index("run_dir")
    assert frame.loc["runs/rope_300", "fingerprint"] == config_fingerprint(
        config(**{"train.steps": 300})
    )
    report = make_report(tmp_path, metric="loss")
    (table,) = report.tables
    assert len(table.rows) == 2 and all(r.startswith("rope · config ") for r in table.rows)
    assert not report.warnings  # the fingerprints are known, so no duplicate and no doubt


def test_cli_report_passes_where_and_by_and_prints_duplicate_warnings(tmp_path, cli):
    write_run(tmp_path, "rope_1000", config(**{"train.steps": 1000}), {8: 1.0, 16: 2.0})
    write_run(tmp_path, "rope_300", config(**{"train.steps": 300}), {8: 1.5, 16: 3.5})
    write_run(tmp_path, "rope_300b", config(**{"train.steps": 300}), {8: 1.5, 16: 3.5}, age=50)
    out = cli("report", "--root", str(tmp_path), "--metric", "loss", "--by", "train.steps",
              "--where", "train.steps=300", "--format", "md")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "train.steps=300" in out.stdout and "train.steps=1000" not in out.stdout
    assert "posx: warning:" in out.stderr and "rope_300b" in out.stderr


# --- issue 35, item 14: which configuration a row comes from ----------------------------------

YARN = "encoding.scaling.factor=4 encoding.scaling.type=yarn"


def add_variant(run: Path, overrides: str, losses: dict[int, float]) -> None:
    """Eval-time variant rows (``overrides``) appended to ``run``'s eval.csv, as posx eval
    writes them."""
    rows = pd.read_csv(run / "eval.csv", keep_default_na=False, na_values=[""])
    extra = [rows.iloc[0].to_dict() | {"overrides": overrides, "eval_length": length,
                                       "window": length, "stride": length, "loss": loss}
             for length, loss in losses.items()]  # fmt: skip
    pd.concat([rows, pd.DataFrame(extra)]).to_csv(run / "eval.csv", index=False)


def configs_table(page: str) -> list[dict[str, str]]:
    """The HTML page's configurations table as one {header: cell text} per row."""
    from tests.unit.report.test_report_html import parse

    (section,) = [t for t in parse(page).find_all("table") if t.attrs.get("class") == "configs"]
    header = [th.all_text() for th in section.find_all("th")]
    return [
        dict(zip(header, [td.all_text() for td in tr.find_all("td")], strict=True))
        for tr in section.find_all("tbody")[0].find_all("tr")
    ]


def test_a_variant_row_names_its_base_configuration_when_two_share_its_encoding(tmp_path):
    # rope trained for 1000 and for 300 steps; only the 1000-step run was evaluated with YaRN.
    # The variant row's label used to be plain `rope+yarn×4`: which rope was scaled?
    run = write_run(tmp_path, "rope_1000", config(**{"train.steps": 1000}), {8: 1.0, 16: 2.0})
    write_run(tmp_path, "rope_300", config(**{"train.steps": 300}), {8: 1.5, 16: 3.5})
    add_variant(run, YARN, {8: 1.0, 16: 1.4})
    (table,) = make_report(tmp_path, metric="loss", variants=["all"]).tables
    assert sorted(table.rows) == [
        "rope · train.steps=1000",
        "rope · train.steps=300",
        "rope+yarn×4 · train.steps=1000",
    ]
    assert table.cell("rope+yarn×4 · train.steps=1000", 16).mean == 1.4


def test_configurations_table_says_how_configurations_with_one_label_differ(tmp_path):
    # rope trained at two lengths: two tables, each with a row `rope`; the configurations list
    # showed `rope` twice with nothing to tell the two apart.
    short = write_run(tmp_path, "rope_L8", config(**{"train.length": 8}), {8: 1.0, 16: 2.0})
    write_run(tmp_path, "rope_L16", config(**{"train.length": 16}), {16: 1.1, 32: 2.1})
    write_run(tmp_path, "alibi_L8", config("alibi", **{"train.length": 8}), {8: 1.2, 16: 1.3})
    add_variant(short, YARN, {8: 1.0, 16: 1.5})
    report = make_report(tmp_path, metric="loss", variants=["all"])
    rows = configs_table(render(report, "html"))
    differs = [h for h in rows[0] if h.startswith("differs")]
    assert differs, list(rows[0])
    rope = sorted((r[differs[0]], r["rows"]) for r in rows if "rope" in r["rows"])
    assert rope == [("train.length=16", "rope"), ("train.length=8", "rope, rope+yarn×4")]
    (alibi,) = [r for r in rows if r["rows"] == "alibi"]
    assert alibi[differs[0]] == ""  # its label is unique: nothing to tell apart
