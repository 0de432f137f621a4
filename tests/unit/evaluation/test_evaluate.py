"""The length sweep: rows, per-position buckets, the Task hook, replacement, failures."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from posx.config.build import build_model, build_task
from posx.config.compose import compose
from posx.config.saved import recorded_overrides, with_eval_defaults
from posx.evaluation.sweep import evaluate_run
from posx.saved import SavedRun
from posx.tasks.base import Batch

TINY = ["task=copy", "model.d_model=32", "model.n_heads=4", "model.n_layers=1", "train.length=16"]


def make_run(tmp_path: Path, *extra: str):
    """A run directory with run.json, and an untrained model, task and config for it."""
    cfg = compose([*TINY, "eval.tokens=320", f"root={tmp_path}", *extra])
    torch.manual_seed(0)
    task = build_task(cfg)
    model = build_model(cfg, task.vocab_size)
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    info = {"run": "r1", "encoding": "alibi", "task": "copy", "model": "tiny", "seed": 0}
    (run / "run.json").write_text(json.dumps({**info, "train_length": 16, "schema_version": 1}))
    return run, model, task, cfg


def evaluate(run, model, task, cfg, lengths, **kw):
    return evaluate_run(SavedRun(run), lengths, model=model, task=task, cfg=cfg, **kw)


@pytest.mark.parametrize("mode", ["eval.mode=full", "eval.mode=sliding"])
@pytest.mark.parametrize("buckets", ["log", "5"])
def test_bucket_losses_average_to_the_row_loss(tmp_path, mode, buckets):
    run, model, task, cfg = make_run(tmp_path, "encoding=alibi", mode, f"eval.buckets={buckets}")
    rows = evaluate(run, model, task, cfg, [16, 40])
    pos = pd.read_csv(run / "eval_positions.csv")
    for row in rows:
        assert row["status"] == "ok"
        mine = pos[pos["eval_length"] == row["eval_length"]]
        assert mine["tokens"].sum() == row["tokens"]
        assert (mine["tokens"] * mine["loss"]).sum() / mine["tokens"].sum() == pytest.approx(
            row["loss"], rel=1e-12
        )
        assert (mine["tokens"] * mine["acc"]).sum() / mine["tokens"].sum() == pytest.approx(
            row["acc"], rel=1e-12
        )
        assert (mine["bucket_start"] < mine["bucket_end"]).all()
        assert mine["bucket_end"].max() <= row["eval_length"]
        assert set(mine["mode"]) == {row["mode"]} and set(mine["window"]) == {row["window"]}


def test_rows_record_protocol_memory_and_throughput(tmp_path):
    run, model, task, cfg = make_run(tmp_path, "encoding=alibi", "eval.mode=sliding")
    cfg.eval.stride = 4
    full, slide = evaluate(run, model, task, cfg, [16, 48])
    assert (full["mode"], full["window"], full["stride"]) == ("sliding", 16, 16)  # one window
    assert (slide["mode"], slide["window"], slide["stride"]) == ("sliding", 16, 4)
    # 48 = 16 + 8 windows of stride 4 -> 9 windows of 16 tokens per sequence
    assert slide["forward_tokens"] == slide["sequences"] * 9 * 16
    assert len(list((tmp_path / ".eval_cache").glob("*.safetensors"))) == 2  # shared data
    for row in (full, slide):
        assert row["peak_mem_mb"] > 0 and row["mem_delta_mb"] >= 0
        assert row["seconds"] > 0
        assert row["tokens_per_s"] == pytest.approx(row["forward_tokens"] / row["seconds"])


def test_rerun_replaces_rows_and_buckets(tmp_path):
    run, model, task, cfg = make_run(tmp_path, "encoding=alibi")
    evaluate(run, model, task, cfg, [16, 32])
    first = pd.read_csv(run / "eval_positions.csv")
    evaluate(run, model, task, cfg, [16, 32])
    assert len(pd.read_csv(run / "eval.csv")) == 2
    pd.testing.assert_frame_equal(pd.read_csv(run / "eval_positions.csv"), first)
    cfg.eval.buckets = "4"  # other bucket edges replace the old buckets of the same rows
    evaluate(run, model, task, cfg, [32])
    pos = pd.read_csv(run / "eval_positions.csv")
    at32 = pos[pos["eval_length"] == 32]
    assert set(at32["bucket_end"] - at32["bucket_start"]) == {4}
    assert len(pos[pos["eval_length"] == 16]) == len(first[first["eval_length"] == 16])


def test_failed_length_is_a_row_and_drops_its_old_buckets(tmp_path, monkeypatch):
    run, model, task, cfg = make_run(tmp_path, "encoding=alibi")
    evaluate(run, model, task, cfg, [16, 32])

    def boom(*args, **kwargs):
        raise RuntimeError("out of memory at this length\ndetails")

    monkeypatch.setattr("posx.evaluation.sweep.score", boom)
    rows = evaluate(run, model, task, cfg, [32])
    assert rows[0]["status"] == "failed" and rows[0]["reason"] == "out of memory at this length"
    pos = pd.read_csv(run / "eval_positions.csv")
    assert set(pos["eval_length"]) == {16}


def test_unsupported_length_has_no_buckets(tmp_path):
    run, model, task, cfg = make_run(tmp_path, "encoding=learned")
    rows = evaluate(run, model, task, cfg, [16, 32])
    assert [r["status"] for r in rows] == ["ok", "unsupported"]
    assert "16 positions" in rows[1]["reason"]
    assert set(pd.read_csv(run / "eval_positions.csv")["eval_length"]) == {16}


def test_sliding_window_within_max_len_evaluates_a_learned_encoding_at_any_length(tmp_path):
    run, model, task, cfg = make_run(tmp_path, "encoding=learned", "eval.mode=sliding")
    rows = evaluate(run, model, task, cfg, [32, 64])  # window = train length = max_len = 16
    assert [(r["status"], r["window"]) for r in rows] == [("ok", 16), ("ok", 16)]


def test_sequence_metrics_hook_gets_the_whole_set_and_its_exact_matches(tmp_path):
    run, model, task, cfg = make_run(tmp_path, "encoding=nope")
    seen = []

    def sequence_metrics(data: Batch, correct: torch.Tensor) -> dict[str, float]:
        seen.append((data.inputs.shape, correct.dtype, correct.shape))
        return {"acc_depth_0_50": 0.25, "acc_depth_50_100": 0.75}

    task.sequence_metrics = sequence_metrics
    rows = evaluate(run, model, task, cfg, [16, 32])
    assert seen == [
        (torch.Size([20, 16]), torch.bool, torch.Size([20])),
        (torch.Size([10, 32]), torch.bool, torch.Size([10])),
    ]
    frame = pd.read_csv(run / "eval.csv")
    assert frame["acc_depth_0_50"].tolist() == [0.25, 0.25]
    assert rows[1]["acc_depth_50_100"] == 0.75


def test_exact_match_column_is_the_mean_of_the_hook_input(tmp_path):
    run, model, task, cfg = make_run(tmp_path, "encoding=nope")
    got = []
    task.sequence_metrics = lambda data, correct: got.append(correct.float().mean().item()) or {}
    rows = evaluate(run, model, task, cfg, [16])
    assert rows[0]["exact_match"] == pytest.approx(got[0])


def test_recorded_overrides_leave_protocol_keys_out():
    assert recorded_overrides(["eval.mode=sliding", "encoding.base=4", "eval.seed=3"]) == (
        "encoding.base=4 eval.seed=3"
    )
    assert recorded_overrides(["eval.window=8", "eval.stride=2", "eval.buckets=log"]) == ""


def test_old_run_configs_get_the_new_eval_defaults(tmp_path):
    from omegaconf import OmegaConf

    old = OmegaConf.create({"eval": {"lengths": [16], "tokens": 8, "batch_tokens": 8, "seed": 1}})
    cfg = with_eval_defaults(old)
    assert (cfg.eval.mode, cfg.eval.window, cfg.eval.stride, cfg.eval.buckets) == (
        "full",
        None,
        None,
        "log",
    )
    assert cfg.eval.tokens == 8


def test_rows_record_the_tasks_chance_level(tmp_path):
    run, model, task, cfg = make_run(tmp_path, "encoding=nope")
    task.chance = lambda data: 0.25  # copy's own is 0.0; the row must carry the task's value
    evaluate(run, model, task, cfg, [16, 32])
    assert pd.read_csv(run / "eval.csv")["chance"].tolist() == [0.25, 0.25]


def test_rows_record_the_longest_context_read(tmp_path):
    run, model, task, cfg = make_run(tmp_path, "encoding=alibi", "eval.mode=sliding")
    rows = evaluate(run, model, task, cfg, [16, 48])  # windows of 16 (the training length)
    last_scored = [int(task.eval_set(n, 1, 0).mask[0].nonzero().max()) + 1 for n in (16, 48)]
    assert [r["max_context"] for r in rows] == [last_scored[0], 16]
    assert pd.read_csv(run / "eval.csv")["max_context"].tolist() == [last_scored[0], 16]


def test_length_the_held_out_text_cannot_fill_is_unsupported_naming_what_it_has(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(bytes(range(256)) * 10)  # 2560 bytes, 256 held out
    text = ["task=text", f"task.corpus={corpus}", "task.val_fraction=0.1", "encoding=alibi"]
    run, model, task, cfg = make_run(tmp_path, *text)
    rows = evaluate(run, model, task, cfg, [16, 255, 256])
    assert [r["status"] for r in rows] == ["ok", "ok", "unsupported"]
    assert rows[2]["reason"].startswith("the corpus validation split has 256 bytes, fewer than")
    assert [r["max_context"] for r in rows[:2]] == [16, 255]
