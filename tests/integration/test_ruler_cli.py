"""``posx eval hf:NAME --suite ruler`` as a user types it: rows per task and length with sample
counts, intervals and true prompt lengths, what the model said in a side file, the samples
cached for the next evaluation, ``posx report``'s tasks x lengths table with the effective
length; every bad input one line, exit 2, nothing written."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.integration.test_cli_errors import assert_one_line_error
from tests.unit.pretrained.tiny_models import (
    model_root,
    offline_hub,
    save_model,
    sentencepiece_tokenizer,
)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = model_root(tmp_path_factory.mktemp("ruler_cli"), ("llama",))
    save_model("llama", root / "llama_sp", sentencepiece_tokenizer())
    return root


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    offline_hub(monkeypatch, tmp_path / "hf_home")


def ruler(cli, models, root, *args, model="llama"):
    corpus = f"task.corpus={models / 'corpus.txt'}"
    return cli("eval", f"hf:{models / model}", "--root", str(root), "--suite", "ruler", corpus,
               "--no-progress", *args)  # fmt: skip


def test_ruler_rows_generations_cache_and_report(cli, models, tmp_path):
    root = tmp_path / "results"
    args = [
        "--lengths",
        "1000",
        "ruler.tasks=niah_single_1,vt",
        "ruler.samples=2",
        "experiment=mine",
    ]
    proc = ruler(cli, models, root, *args)
    assert proc.returncode == 0, proc.stderr
    assert "effective length at 85.6: below 1000" in proc.stdout and "niah_single_1" in proc.stdout
    (run,) = (root / "pretrained").iterdir()
    rows = pd.read_csv(run / "eval.csv", keep_default_na=False)
    assert list(rows["task"]) == ["ruler/niah_single_1", "ruler/vt", "ruler/average"]
    assert set(rows["status"]) == {"ok"} and set(rows["eval_length"]) == {1000}
    tasks = pd.read_csv(run / "eval.csv").iloc[:2]
    assert (tasks["samples"] == 2).all() and (tasks["score_high"] > tasks["score_low"]).all()
    assert (tasks["prompt_tokens_max"] + tasks["budget"] <= 1000).all()
    assert list(tasks["budget"]) == [128, 30] and "text" not in set(rows["task"])
    said = pd.read_csv(run / "ruler_generations.csv", keep_default_na=False)
    assert len(said) == 4 and set(said["task"]) == {"ruler/niah_single_1", "ruler/vt"}
    assert said["references"].str.len().min() > 0 and "prediction" in said
    cached = sorted((root / ".cache" / "ruler").iterdir())
    assert len(cached) == 2
    stamps = [p.stat().st_mtime_ns for p in cached]
    # again, with variants: the samples are read back, the rows merged; Self-Extend generates
    # with the KV cache too (its attention groups the cached keys)
    variants = ["--variant", "none", "--variant", "yarn:4", "--variant", "selfextend:4,16"]
    proc = ruler(cli, models, root, *args, *variants)
    assert proc.returncode == 0, proc.stderr
    assert [p.stat().st_mtime_ns for p in cached] == stamps
    rows = pd.read_csv(run / "eval.csv", keep_default_na=False)
    assert len(rows) == 9 and len(pd.read_csv(run / "ruler_generations.csv")) == 12
    extended = rows[rows["overrides"].str.contains("selfextend")]
    assert len(extended) == 3 and set(extended["status"]) == {"ok"}, extended
    conf = tmp_path / "conf"
    (conf / "claims").mkdir(parents=True)
    (conf / "experiment").mkdir()
    (conf / "experiment" / "mine.yaml").write_text("# @package _global_\nexperiment_name: mine\n")
    (conf / "claims" / "mine.yaml").write_text(
        "paper: RULER claims of a pretrained model\nclaims:\n"
        "  - id: some\n    table: t\n"
        "    statement: llama >= 0 at L=1000 by score on ruler/average\n"
        "  - id: all\n    table: t\n    statement: llama >= 99 at L=1000 by score on ruler/vt\n"
        "  - id: short\n    table: t\n    statement: 'effective_length: llama < 1000'\n"
    )
    check = cli("--config-dir", str(conf), "check", str(root), "--min-seeds", "1", "--format",
                "json")  # fmt: skip
    claims = json.loads(check.stdout)["claims"]
    verdicts = {c["claim"]: c["verdict"] for c in claims}
    assert verdicts == {"some": "holds", "all": "fails", "short": "holds"}, check.stdout
    # read at the threshold the rows record (no note that it was assumed)
    assert not next(c for c in claims if c["claim"] == "short")["notes"]
    report = cli("report", "--root", str(root), "--threshold", "0")
    assert report.returncode == 0, report.stderr
    assert "RULER llama: score in percent" in report.stdout
    assert "effective length at 0: 1000" in report.stdout  # every score is >= 0


@pytest.mark.parametrize(
    ("args", "model", "text"),
    [
        (
            ["ruler.tasks=niah_single_1,niah"],
            "llama",
            "ruler.tasks: unknown RULER task 'niah'; the tasks are niah_single_1",
        ),
        (
            ["--lengths", "300"],
            "llama",
            "RULER task niah_single_1 at length 300: its smallest prompt is",
        ),
        (
            ["--lengths", "4000", "ruler.tasks=niah_single_1"],
            "llama_sp",
            "cannot encode the RULER prompt of niah_single_1",
        ),
        (["--suite", "rular"], "llama", "unknown --suite 'rular'; choose from text, ruler"),
        (["ruler.samples=0"], "llama", "ruler.samples must be a positive integer"),
        (["ruler.template=chat"], "llama", "has no chat template"),
        (["--lengths", "65536", "--max-memory", "64M"], "llama", "at 65536 tokens needs about"),
        (["--mode", "sliding"], "llama", "--mode, --window, --stride and --buckets apply to"),
        (
            ["--suite", "text", "ruler.samples=3"],
            "llama",
            "ruler.samples applies to RULER's tasks: add --suite ruler",
        ),
    ],
    ids=[
        "unknown-task",
        "too-short",
        "cannot-encode",
        "unknown-suite",
        "no-samples",
        "no-chat",
        "memory",
        "sliding",
        "ruler-setting-without-ruler",
    ],
)
def test_bad_ruler_input_is_one_line_and_writes_nothing(cli, models, tmp_path, args, model, text):
    root = tmp_path / "results"
    proc = ruler(cli, models, root, *args, model=model)
    assert_one_line_error(proc, 2, text)
    assert not root.exists()


def test_ruler_on_a_posx_extend_output_goes_into_its_run(cli, models, tmp_path):
    """``posx extend hf:`` makes a YaRN x2 run; ``posx eval RUN --suite ruler`` evaluates its
    model into that run, with the ``ruler.*`` settings of the command."""
    root = tmp_path / "results"
    corpus = f"task.corpus={models / 'corpus.txt'}"
    done = cli("extend", f"hf:{models / 'llama'}", corpus, "extension=yarn", "extend.factor=2",
               "extend.steps=1", "extend.warmup_steps=1", "train.batch_size=2",
               "train.micro_batch=1", "task.val_fraction=0.5", "eval.lengths=[]",
               f"root={root}")  # fmt: skip
    assert done.returncode == 0, done.stderr
    (run,) = (root / "pretrained").iterdir()
    proc = cli("eval", str(run), "--suite", "ruler", "--lengths", "1000",
               "ruler.tasks=niah_single_1", "ruler.samples=2")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "RULER" in proc.stdout and "niah_single_1" in proc.stdout
    rows = pd.read_csv(run / "eval.csv")
    assert list(rows["task"]) == ["ruler/niah_single_1", "ruler/average"]
    assert set(rows["samples"]) == {2} and (run / "ruler_generations.csv").is_file()
    assert len(set(rows["encoding"])) == 1 and rows["eval_length"].eq(1000).all()


@pytest.mark.slow
def test_two_processes_give_the_rows_of_one(models, tmp_path):
    """torchrun --nproc_per_node 2 on gloo: each process answers half the prompts, the first
    writes; the rows and what the model said equal one process's."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "POSX_DEBUG": "0",
           "HF_HUB_OFFLINE": "1"}  # fmt: skip
    args = ["eval", f"hf:{models / 'llama'}", "--suite", "ruler", "--lengths", "1000",
            f"task.corpus={models / 'corpus.txt'}", "ruler.tasks=niah_single_1,vt",
            "ruler.samples=3", "--no-progress", "--variant", "none", "--variant",
            "yarn:2"]  # fmt: skip
    tables = {}
    for procs in (1, 2):
        root = tmp_path / f"p{procs}"
        launch = ["-m", "torch.distributed.run", "--nproc_per_node", str(procs), "--standalone"]
        proc = subprocess.run([sys.executable, *launch, "-m", "posx", *args, "--root", str(root)],
                              env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        (run,) = (root / "pretrained").iterdir()
        rows = pd.read_csv(run / "eval.csv")
        said = pd.read_csv(run / "ruler_generations.csv", keep_default_na=False)
        keep = ["task", "eval_length", "overrides", "score", "samples", "prompt_tokens_max"]
        tables[procs] = (rows[keep].fillna(""), said)
    pd.testing.assert_frame_equal(tables[1][0], tables[2][0])
    pd.testing.assert_frame_equal(tables[1][1], tables[2][1])
    assert len(tables[2][1]) == 2 * 2 * 3


@pytest.mark.slow
def test_one_process_failing_fails_the_rows_in_every_process(models, tmp_path):
    """torchrun --nproc_per_node 2 on gloo, rank 1's generation out of memory: both processes
    finish within the timeout (before, rank 1 skipped the gather and rank 0 waited in it), and
    rank 0 writes each task's ``failed`` row naming rank 1, as one process writes its own
    failure. Each process has left the process group when it exits: one that had not could
    abort on its way out (SIGABRT, torchrun's exit 1 after the work was done)."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "POSX_DEBUG": "0",
           "HF_HUB_OFFLINE": "1", "POSX_TEST_FAIL_RANK": "1"}  # fmt: skip
    root = tmp_path / "r"
    launch = ["-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
              str(REPO / "tests" / "integration" / "failing_rank.py")]  # fmt: skip
    args = ["eval", f"hf:{models / 'llama'}", "--suite", "ruler", "--lengths", "1000",
            f"task.corpus={models / 'corpus.txt'}", "ruler.tasks=niah_single_1,vt",
            "ruler.samples=2", "--no-progress", "--root", str(root)]  # fmt: skip
    proc = subprocess.run([sys.executable, *launch, *args], env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in (0, 1):  # each left the group with the others (else it can abort at exit)
        assert f"rank {rank} in its process group at exit: False" in proc.stderr, proc.stderr
    (run,) = (root / "pretrained").iterdir()
    rows = pd.read_csv(run / "eval.csv", keep_default_na=False)
    assert list(rows["task"]) == ["ruler/niah_single_1", "ruler/vt", "ruler/average"]
    assert set(rows["status"]) == {"failed"}
    reason = "rank 1 of 2 failed: RuntimeError: CUDA out of memory (made by the test)"
    assert list(rows["reason"])[:2] == [reason, reason]
    assert not (run / "ruler_generations.csv").exists()


def test_several_processes_refuse_what_they_cannot_share(cli, models, tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    proc = cli("eval", f"hf:{models / 'llama'}", "--suite", "text,ruler", "--root",
               str(tmp_path / "r"), f"task.corpus={models / 'corpus.txt'}")  # fmt: skip
    assert_one_line_error(proc, 2, "under torchrun, posx eval hf: shares RULER's samples")
    assert not (tmp_path / "r").exists()


def test_a_sweep_job_runs_ruler(cli, models, tmp_path):
    """``posx eval -m hf:... --suite ruler``: the option and the ruler.* settings reach the job
    (configs/pretrained.yaml's eval.suite and ruler.*)."""
    root = tmp_path / "results"
    out = cli("eval", "-m", f"hf:{models / 'llama'}", "--suite", "ruler", "--lengths", "1000",
              f"root={root}", f"task.corpus={models / 'corpus.txt'}",
              "ruler.tasks=niah_single_1", "ruler.samples=2")  # fmt: skip
    assert out.returncode == 0, out.stderr
    (run,) = (root / "pretrained").iterdir()
    rows = pd.read_csv(run / "eval.csv")
    assert list(rows["task"]) == ["ruler/niah_single_1", "ruler/average"]
    assert set(rows["samples"]) == {2}
