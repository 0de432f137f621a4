"""Self-Extend as a user types it: ``posx eval RUN --variant selfextend:G,W`` on a posx RoPE run
and ``posx eval hf:MODEL --variant selfextend:G,W``; on a run without RoPE, one line, exit 2,
nothing written."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import TINY
from tests.integration.test_cli_errors import assert_one_line_error
from tests.integration.test_pretrained_cli import hf_eval, models, offline  # noqa: F401

SE = "encoding.scaling.factor=2.0 encoding.scaling.type=selfextend encoding.scaling.window=8"


def rows_of(run: Path) -> pd.DataFrame:
    return pd.read_csv(run / "eval.csv", keep_default_na=False)


def eval_beside_none(cli, run: Path, length: int, variant: str) -> pd.DataFrame:
    """``posx eval RUN --lengths L --variant none --variant VARIANT``: the run's rows after."""
    proc = cli("eval", str(run), "--lengths", str(length), "--variant", "none", "--variant",
               variant, "--no-progress")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return rows_of(run)


def test_a_posx_rope_run_is_evaluated_with_self_extend(cli, copy_run):
    rows = eval_beside_none(cli, copy_run(), 64, "selfextend:2,8")
    mine = rows[(rows["overrides"] == SE) & (rows["eval_length"] == 64)]
    base = rows[(rows["overrides"] == "") & (rows["eval_length"] == 64)]
    assert len(mine) == 1 and len(base) == 1 and set(mine["status"]) == {"ok"}
    assert '"type": "selfextend"' in mine["scaling"].iloc[0]
    # a window of 8 on 64 tokens groups most pairs: another number than plain RoPE
    assert float(mine["loss"].iloc[0]) != pytest.approx(float(base["loss"].iloc[0]), abs=1e-6)


def test_a_window_covering_the_length_gives_plain_ropes_number(cli, copy_run):
    rows = eval_beside_none(cli, copy_run(), 32, "selfextend:4,32")
    at32 = rows[rows["eval_length"] == 32].set_index("overrides")["loss"].astype(float)
    window = (
        "encoding.scaling.factor=4.0 encoding.scaling.type=selfextend encoding.scaling.window=32"
    )
    assert at32[window] == pytest.approx(at32[""], abs=1e-5)


def test_a_run_without_rope_is_refused_and_nothing_is_written(cli, tmp_path):
    proc = cli("train", *TINY, "encoding=alibi", "train.steps=2", f"root={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    (run,) = [p.parent for p in tmp_path.rglob("run.json")]
    before = hashlib.sha256((run / "eval.csv").read_bytes()).hexdigest()
    proc = cli("eval", str(run), "--lengths", "64", "--variant", "selfextend:2,8")
    assert_one_line_error(proc, 2, "has no RoPE scaling (encoding.scaling)")
    assert "ALiBi" in proc.stderr or "alibi" in proc.stderr.lower()
    assert hashlib.sha256((run / "eval.csv").read_bytes()).hexdigest() == before


def test_a_bad_self_extend_variant_is_one_line(cli, copy_run):
    proc = cli("eval", str(copy_run()), "--variant", "selfextend:2")
    assert_one_line_error(proc, 2, "selfextend:G,W")


def test_an_hf_model_is_evaluated_with_self_extend(cli, models, tmp_path):  # noqa: F811
    proc = hf_eval(cli, models, tmp_path, "--lengths", "48", "--variant", "none", "--variant",
                   "selfextend:2,8")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (run,) = (tmp_path / "pretrained").iterdir()
    rows = rows_of(run).set_index("overrides")
    assert rows.loc[SE, "status"] == "ok"
    assert '"self_extend_group": 2' in rows.loc[SE, "scaling"]
    assert float(rows.loc[SE, "loss"]) != pytest.approx(float(rows.loc["", "loss"]), abs=1e-6)


def test_an_hf_model_without_rope_gets_unsupported_rows(cli, models, tmp_path):  # noqa: F811
    proc = hf_eval(cli, models, tmp_path, "--lengths", "16", "--variant", "selfextend:2,8",
                   model="gpt2")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (run,) = (tmp_path / "pretrained").iterdir()
    (row,) = rows_of(run).to_dict("records")
    assert row["status"] == "unsupported" and "no rotary positions" in row["reason"]
