"""``posx extend hf:NAME_OR_DIR`` as a user types it: a tiny random Llama extended with YaRN ×2
writes a model directory that transformers loads with that scaling, its run is evaluated,
reported and checked beside the base, an interrupted extension resumes to the same weights, two
processes under torchrun (FSDP2 on gloo) take the same steps as one, and each refusal is one
line, exit 2, with nothing written."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import REPO, claims_config, run_in_process
from tests.integration.test_cli_errors import assert_one_line_error
from tests.unit.pretrained.tiny_models import model_root, offline_hub

FT = ["extend.steps=4", "extend.lr=1e-3", "extend.warmup_steps=1", "train.batch_size=4",
      "train.micro_batch=1", "train.checkpoint_every=2", "eval.tokens=128",
      "task.val_fraction=0.5"]  # fmt: skip


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    torch.set_num_threads(1)
    return model_root(tmp_path_factory.mktemp("hf_extend"), ("llama", "qwen2", "gpt2"))


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    offline_hub(monkeypatch, tmp_path / "hf_home")


def extend_args(models: Path, root: Path, *args: str, model: str = "llama") -> list[str]:
    corpus = f"task.corpus={models / 'corpus.txt'}"
    return ["extend", f"hf:{models / model}", corpus, *FT, f"root={root}", *args]


@pytest.fixture(scope="module")
def extended(models, tmp_path_factory) -> Path:
    """The tiny Llama extended with YaRN ×2 (32 -> 64) in one process, once per module."""
    root = tmp_path_factory.mktemp("yarn")
    os.environ["HF_HUB_OFFLINE"] = "1"
    done = run_in_process(*extend_args(models, root, "extension=yarn", "extend.factor=2",
                                       "experiment=mine"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    (run,) = (root / "pretrained").iterdir()
    return run


def held_out_loss(model, models: Path, length: int, windows: int) -> float:
    """transformers' own forward loss over the first held-out windows of ``length``."""
    from posx.pretrained.text import held_out_bytes, tokenize_held_out

    raw, name = held_out_bytes(str(models / "corpus.txt"), 0.5, 8_000_000, None)
    from transformers import AutoTokenizer

    text = tokenize_held_out(AutoTokenizer.from_pretrained(models / "llama"), raw, name)
    ids = text.ids[: windows * length + 1]
    losses = [model(input_ids=ids[None, i * length : (i + 1) * length + 1],
                    labels=ids[None, i * length : (i + 1) * length + 1]).loss
              for i in range(windows)]  # fmt: skip
    return float(torch.stack(losses).mean())


def test_yarn_extension_loads_anywhere_and_reads_as_a_run(cli, models, extended, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(extended / "model").eval()
    assert model.config.rope_parameters == {"rope_theta": 10000.0, "rope_type": "yarn",
                                            "factor": 2.0,
                                            "original_max_position_embeddings": 32}  # fmt: skip
    assert model.config.max_position_embeddings == 64 and model.model.rotary_emb.rope_type == "yarn"
    assert len(AutoTokenizer.from_pretrained(extended / "model")) == model.config.vocab_size
    rows = pd.read_csv(extended / "eval.csv", keep_default_na=False)
    assert set(rows["encoding"]) == {"llama+yarn×2+ft@64"} and set(rows["eval_length"]) == {32, 64}
    row = rows[rows["eval_length"] == 64].iloc[0]
    with torch.no_grad():
        theirs = held_out_loss(model, models, 64, int(row["sequences"]))
    assert abs(float(row["loss"]) - theirs) < 1e-5
    info = json.loads((extended / "run.json").read_text())
    assert info["status"] == "extended" and info["train_length"] == 64 and info["step"] == 4
    assert info["parent"]["revision"].startswith("dir:") and info["parent"]["trained_length"] == 32
    ext = info["extension"]
    assert (ext["method"], ext["factor"], ext["steps"], ext["window"]) == ("yarn", 2.0, 4, 64)
    size = (models / "corpus.txt").stat().st_size  # held-in and held-out split it, no overlap
    assert abs(info["train_corpus"]["train_bytes"] + info["corpus"]["val_bytes"] - size) <= 4
    assert info["train_corpus"]["bytes_per_token"] > 1
    assert (
        len(pd.read_csv(extended / "metrics.csv")) == 4 and not (extended / "train_state").exists()
    )

    again = cli("eval", str(extended), "--lengths", "128")
    assert again.returncode == 0, again.stderr
    assert set(pd.read_csv(extended / "eval.csv")["eval_length"]) == {32, 64, 128}
    root = extended.parent.parent
    base = cli("eval", f"hf:{models / 'llama'}", "--root", str(root), "--lengths", "32,64",
               f"task.corpus={models / 'corpus.txt'}", "task.val_fraction=0.5", "eval.tokens=128",
               "experiment=mine", "--no-progress")  # fmt: skip
    assert base.returncode == 0, base.stderr
    md = cli("report", "--root", str(root), "--by", "train_length", "--format", "md").stdout
    (table,) = [t for t in md.split("\n\n") if "llama+yarn×2+ft@64" in t and "| llama" in t]
    listing = json.loads(cli("runs", "--root", str(root), "--format", "json").stdout)
    assert {r["status"] for r in listing} == {"extended", "pretrained"}

    claims = ("  - id: close\n    table: t\n"
              "    statement: llama+yarn×2+ft@64 <= llama + 100 at L=64 by bpb\n"
              "  - id: far\n    table: t\n"
              "    statement: llama+yarn×2+ft@64 < llama - 100 at L=64 by bpb\n")  # fmt: skip
    conf = claims_config(tmp_path / "conf", claims)
    check = cli("--config-dir", str(conf), "check", str(root), "--min-seeds", "1", "--format",
                "json")  # fmt: skip
    verdicts = {c["claim"]: c["verdict"] for c in json.loads(check.stdout)["claims"]}
    assert verdicts == {"close": "holds", "far": "fails"}, check.stdout + check.stderr


def test_seeds_of_one_setting_are_one_configuration_paired_with_the_base(cli, models, extended,
                                                                       tmp_path):  # fmt: skip
    """A second seed of the fixture's extension: each run records its own seed (run.json and
    eval.csv), both share one fingerprint (settings + base, not their weights), so the report
    has one row of n=2 and posx check compares one configuration; their parent key is the base
    run's own, so check pairs both with the one base (1 parent) instead of 2 unrelated pairs."""
    root = tmp_path / "root"
    shutil.copytree(extended.parent.parent, root)
    for d in (root / "pretrained").iterdir():
        if d.name != extended.name:
            shutil.rmtree(d)  # other tests' runs (evaluated base, ...) may have landed here
    done = run_in_process(*extend_args(models, root, "extension=yarn", "extend.factor=2",
                                       "experiment=mine", "seed=1"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    base = cli("eval", f"hf:{models / 'llama'}", "--root", str(root), "--lengths", "32,64",
               f"task.corpus={models / 'corpus.txt'}", "task.val_fraction=0.5", "eval.tokens=128",
               "experiment=mine", "--no-progress")  # fmt: skip
    assert base.returncode == 0, base.stderr
    runs = {}
    for d in (root / "pretrained").iterdir():
        runs[json.loads((d / "run.json").read_text())["seed"], d.name.startswith("llama_")] = d
    one = runs[1, False]
    assert set(pd.read_csv(one / "eval.csv")["seed"]) == {1}
    prints = {json.loads((runs[s, False] / "run.json").read_text())["fingerprint"] for s in (0, 1)}
    rows = {
        fp
        for s in (0, 1)
        for fp in pd.read_csv(runs[s, False] / "eval.csv", dtype={"fingerprint": str})[
            "fingerprint"
        ]
    }
    assert len(prints) == 1 and rows == prints
    base_info = json.loads((runs[0, True] / "run.json").read_text())
    parent = json.loads((one / "run.json").read_text())["parent"]
    assert (parent["run"], parent["fingerprint"]) == (runs[0, True].name, base_info["fingerprint"])

    md = cli("report", "--root", str(root), "--by", "train_length", "--format", "md").stdout
    (row,) = [x for x in md.splitlines() if x.startswith("| llama+yarn×2+ft@64")]
    assert row.split("|")[2].strip() == "2", md  # n: one configuration at 2 seeds
    conf = claims_config(tmp_path / "conf", "  - id: close\n    table: t\n    statement: "
                         "llama+yarn×2+ft@64 <= llama + 100 at L=64 by bpb\n")  # fmt: skip
    check = cli("--config-dir", str(conf), "check", str(root), "--min-seeds", "1", "--format",
                "json")  # fmt: skip
    (claim,) = json.loads(check.stdout)["claims"]
    assert claim["verdict"] == "holds", check.stdout + check.stderr
    # each extension seed paired with its own parent (docs/reproductions.md's lineage rule): 2
    # comparisons, not "no pair" (the parent key once matched no base) nor every seed x seed
    assert claim["seed_agreement"].endswith(": 2/2"), claim


def _scaled_copy(models: Path, tmp_path: Path, params: dict, context: int) -> Path:
    """The tiny Llama with a RoPE scaling in its config (a Llama 3.1 in small)."""
    scaled = Path(shutil.copytree(models / "llama", tmp_path / f"scaled_{params['rope_type']}"))
    cfg = json.loads((scaled / "config.json").read_text())
    cfg["rope_parameters"] = {**cfg["rope_parameters"], **params}
    cfg["max_position_embeddings"] = context
    (scaled / "config.json").write_text(json.dumps(cfg))
    return scaled


LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 32,
          "low_freq_factor": 1.0, "high_freq_factor": 4.0}  # fmt: skip


@pytest.mark.parametrize(
    ("base", "args", "said"),
    [
        # a base's scaling of another type: refused, naming it (it was replaced: yarn x4 over
        # 32 with a context of 128, shorter than the base's 256)
        ("llama3", ["extension=yarn"], "already carries a RoPE scaling (rope_type llama3, factor "
                                       "8 over 32 tokens); extension=yarn would replace it"),
        # the same type composes: the factors multiply over the same original context
        ("llama3", ["extension=llama3"], '"factor": 32.0, "original_max_position_embeddings": 32'),
        ("llama3", ["extension=llama3"], "trained context 256, target 1024"),
        ("linear", ["extension=pi", "extend.factor=2"], '"rope_type": "linear", "factor": 8.0'),
        ("linear", ["extension=pi", "extend.factor=2"], "trained context 128, target 256"),
        # posx's own extension (yarn x2, fine-tuned at 64) extended again: from 64, not 32
        ("extended", ["extension=yarn", "extend.factor=2"], "trained context 64, target 128"),
        ("extended", ["extension=yarn", "extend.factor=2"],
         '"factor": 4.0, "original_max_position_embeddings": 32'),
    ],
)  # fmt: skip
def test_a_scaled_base_is_composed_with_or_refused(cli, models, extended, tmp_path, base, args,
                                                   said):  # fmt: skip
    model = {
        "llama3": lambda: _scaled_copy(models, tmp_path, LLAMA3, 256),
        "linear": lambda: _scaled_copy(
            models, tmp_path, {"rope_type": "linear", "factor": 4.0}, 128
        ),
        "extended": lambda: extended / "model",
    }[base]()
    result = cli("extend", f"hf:{model}", *args, f"root={tmp_path / 'out'}", "--dry-run")
    if "would replace" in said:
        assert_one_line_error(result, 2, said)
    else:
        assert result.returncode == 0 and said in result.stdout, result.stdout + result.stderr
    assert not (tmp_path / "out").exists()


def test_eval_variants_on_a_scaled_model_compose_or_are_refused_alike(cli, extended, tmp_path):
    """On posx's yarn x2 extension (fine-tuned at 64): yarn composes (x4 over 32) and ntk
    raises theta under yarn; linear, dynamic_ntk and llama3 would replace the saved yarn, and
    each is an unsupported row saying so (linear and dynamic replaced it while ntk kept it)."""
    result = cli("eval", f"hf:{extended / 'model'}", "--lengths", "64", "--root",
                 str(tmp_path), "--no-progress", "eval.tokens=128",
                 *(f"--variant={v}:2" for v in ("yarn", "ntk", "linear", "dynamic_ntk",
                                                 "llama3")))  # fmt: skip
    assert result.returncode == 0, result.stderr
    (run,) = (tmp_path / "pretrained").iterdir()
    rows = pd.read_csv(run / "eval.csv", keep_default_na=False).set_index("overrides")
    assert set(rows["train_length"]) == {64}  # as the extension's own rows say
    yarn = rows.loc["encoding.scaling.factor=2.0 encoding.scaling.type=yarn"]
    assert yarn["status"] == "ok" and json.loads(yarn["scaling"])["factor"] == 4.0
    ntk = rows.loc["encoding.scaling.factor=2.0 encoding.scaling.type=ntk"]
    assert ntk["status"] == "ok" and json.loads(ntk["scaling"])["rope_type"] == "yarn"
    for kind in ("linear", "dynamic_ntk", "llama3"):
        row = rows.loc[f"encoding.scaling.factor=2.0 encoding.scaling.type={kind}"]
        assert row["status"] == "unsupported", kind
        assert (
            "already carries a RoPE scaling (rope_type yarn, factor 2 over 32 tokens); "
            f"--variant {kind}:2 would replace it" in row["reason"]
        ), row["reason"]


def test_pose_on_qwen2_spreads_positions_and_keeps_rope(cli, models, tmp_path):
    done = cli(*extend_args(models, tmp_path, "extension=pose", "extend.factor=2",
                            "extend.steps=2", "eval.lengths=[64]", model="qwen2"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    (run,) = (tmp_path / "pretrained").iterdir()
    info = json.loads((run / "run.json").read_text())
    assert info["encoding"] == "qwen2+pose+ft@32" and info["extension"]["pose_chunks"] == 2
    saved = json.loads((run / "model" / "config.json").read_text())
    assert saved["rope_parameters"]["rope_type"] == "default"
    # trained at 32 (positions spread to 64): the saved context is the one it trained at
    assert saved["max_position_embeddings"] == 32


def test_the_control_saves_the_context_it_trained_at(cli, models, tmp_path):
    done = cli(*extend_args(models, tmp_path, "extension=control", "extend.factor=4",
                            "extend.steps=1", "eval.lengths=[]"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    (run,) = (tmp_path / "pretrained").iterdir()
    assert json.loads((run / "run.json").read_text())["train_length"] == 32
    assert json.loads((run / "model" / "config.json").read_text())["max_position_embeddings"] == 32


def test_an_interrupted_extension_resumes_to_the_same_weights(cli, models, extended, tmp_path,
                                                              monkeypatch, recwarn):  # fmt: skip
    import posx.pretrained.extend.train as loop

    class StopAfterThree(loop.StopOnInterrupt):
        """Ctrl-C during the third of four steps (checked at each step boundary)."""

        checks = 0

        @property
        def requested(self) -> bool:
            StopAfterThree.checks += 1
            return StopAfterThree.checks == 4

        @requested.setter
        def requested(self, value: bool) -> None:
            pass

    monkeypatch.setattr(loop, "StopOnInterrupt", StopAfterThree)
    stopped = cli(*extend_args(models, tmp_path, "extension=yarn", "extend.factor=2",
                               "experiment=mine"))  # fmt: skip
    assert stopped.returncode == 130, stopped.stderr
    monkeypatch.undo()
    (run,) = (tmp_path / "pretrained").iterdir()
    # as training says it (not `posx: error: ...`), and no PyTorch warning about one process
    assert stopped.stderr.strip().splitlines()[-1] == (
        f"posx: interrupted at step 3; checkpoint saved; run: posx resume {run}"
    )
    assert "Warning" not in stopped.stderr, stopped.stderr
    noise = [w for w in recwarn if "torch.distributed is disabled" in str(w.message)]
    assert noise == [], noise  # DCP's one-process warning: printed twice per run before
    assert run.name == extended.name  # the same settings name the same run
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"
    assert [p.name for p in (run / "train_state").iterdir()] == ["step_00000003"]
    again = cli(*extend_args(models, tmp_path, "extension=yarn", "extend.factor=2",
                             "experiment=mine"))  # fmt: skip
    assert_one_line_error(again, 2, "this extension exists already")
    broken = Path(shutil.copytree(run, tmp_path / "broken"))
    (shard,) = (broken / "train_state" / "step_00000003").glob("*.distcp")
    shard.write_bytes(shard.read_bytes()[:100])  # a shard cut short
    assert_one_line_error(cli("resume", str(broken)), 1, "step_00000003 is damaged (")
    resumed = cli("resume", str(run))
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stderr and "at step 3" in resumed.stderr
    a = load_file(str(extended / "model" / "model.safetensors"))
    b = load_file(str(run / "model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert pd.read_csv(run / "metrics.csv")["loss"].tolist() == pd.read_csv(
        extended / "metrics.csv")["loss"].tolist()  # fmt: skip
    assert_one_line_error(cli("resume", str(run)), 2, "already finished; nothing to resume")


def _no_weights(models: Path, tmp_path: Path) -> Path:
    bare = tmp_path / "bare"
    shutil.copytree(models / "llama", bare)
    (bare / "model.safetensors").unlink()
    return bare


def _custom_code(models: Path, tmp_path: Path) -> Path:
    custom = tmp_path / "custom"
    shutil.copytree(models / "llama", custom)
    cfg = json.loads((custom / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForCausalLM": "modeling.Evil"}
    (custom / "config.json").write_text(json.dumps(cfg))
    return custom


@pytest.mark.parametrize(
    ("case", "message"),
    [("no transformers", "extending a pretrained model needs the transformers library: pip "
                         "install 'posx[transformers]'"),
     ("gpt2 yarn", "extension=yarn changes RoPE, but gpt2 has no rotary positions"),
     ("no weights", "holds no weights (no *.safetensors, no pytorch_model.bin)"),
     ("custom code", "asks to run its own code (auto_map in config.json)"),
     ("no method", "posx extend hf:... needs a method: extension=NAME"),
     ("unknown setting", "posx extend hf:... has no setting 'train.length'"),
     ("no cuda", "train.device=cuda but CUDA is not available on this machine"),
     ("too big", "needs about 594.6 MiB per process (1 process(es)), more than the limit of 590.0 "
                 "MiB you set; would fit: train.checkpointing=true")],
)  # fmt: skip
def test_each_refusal_is_one_line_and_writes_nothing(cli, models, tmp_path, monkeypatch, case,
                                                     message):  # fmt: skip
    root = tmp_path / "out"
    model, args = "llama", ["extension=yarn"]
    if case == "no transformers":
        monkeypatch.setitem(sys.modules, "transformers", None)
    elif case == "gpt2 yarn":
        model = "gpt2"
    elif case == "no weights":
        model = str(_no_weights(models, tmp_path))
    elif case == "custom code":
        model = str(_custom_code(models, tmp_path))
    elif case == "no method":
        args = []
    elif case == "unknown setting":
        args.append("train.length=64")
    elif case == "no cuda":
        if torch.cuda.is_available():
            pytest.skip("needs a machine without CUDA")
        args.append("train.device=cuda")
    elif case == "too big":
        args += ["extend.factor=64", "train.micro_batch=4", "train.max_memory=590M"]
    result = cli(*extend_args(models, root, *args, model=model))
    assert_one_line_error(result, 2, message)
    assert not root.exists()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["extension=yarn", "extend.stepz=10"], "has no setting 'extend.stepz'; did you mean "
                                                "extend.steps? It takes extension, "),
        (["extension=yarn", "--dryrun"], "posx extend has no option --dryrun; did you mean "
                                         "--dry-run?"),
        (["extension=yarn", "bogus"], "posx extend hf:... takes key=value settings; got bogus"),
    ],
)  # fmt: skip
def test_a_mistake_is_named_as_the_user_wrote_it(cli, models, tmp_path, args, said):
    root = tmp_path / "out"
    assert_one_line_error(cli(*extend_args(models, root, *args)), 2, said)
    assert not root.exists()


def test_a_length_that_contradicts_the_factor_is_one_warning(cli, models, tmp_path):
    """As `posx extend RUN` warns: extend.length=64 with extend.factor=4 over 32 tokens."""
    args = ["extension=yarn", "extend.length=64", "extend.factor=4", "--dry-run"]
    result = cli(*extend_args(models, tmp_path / "out", *args))
    assert result.returncode == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(warned) == 1 and warned[0].startswith("posx: warning: extend.length=64"), warned
    assert "extend.factor=4 says 128: fine-tuning at 64 with the scaling's factor 4" in warned[0]
    assert "target 64" in result.stdout and not (tmp_path / "out").exists()


def _posx_to_files(tmp_path: Path, *args: str, torch_blocked: bool = False) -> subprocess.Popen:
    """``posx ARGS`` in a subprocess whose output goes to files (as under SLURM or ``> log``);
    with ``torch_blocked``, importing torch fails: what is printed before it needs none."""
    block = "import sys; sys.modules['torch'] = None; " if torch_blocked else "import sys; "
    code = block + "from posx.cli import main; sys.argv = ['posx', *sys.argv[1:]]; main()"
    env = {**os.environ, "POSX_DEBUG": "0", "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], cwd=REPO, env=env,
        stdout=(tmp_path / "out.txt").open("w"), stderr=(tmp_path / "err.txt").open("w"),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip


def test_the_run_and_what_it_does_are_said_before_torch_is_imported(models, extended, tmp_path):
    """Issue 57.2: `posx extend hf:` said nothing for ~14 s (torch, transformers), and with
    output to a file nothing named the run until the end. Torch blocked: the first lines come
    all the same, so they come before the seconds those imports take."""
    root = tmp_path / "out"
    args = extend_args(models, root, "extension=yarn", "extend.factor=2")
    proc = _posx_to_files(tmp_path, *args, torch_blocked=True)
    proc.wait(timeout=120)
    lines = (tmp_path / "out.txt").read_text().splitlines()
    assert lines[0] == f"run directory: {root / 'pretrained' / extended.name}", lines
    assert lines[1] == (f"extending {models / 'llama'} with extension=yarn from 32 to 64 tokens, "
                        "fine-tuning at 64 for 4 steps"), lines  # fmt: skip
    info = json.loads((extended / "run.json").read_text())
    (extended / "run.json").write_text(json.dumps({**info, "status": "interrupted", "step": 2}))
    try:
        proc = _posx_to_files(tmp_path, "resume", str(extended), torch_blocked=True)
        proc.wait(timeout=120)
    finally:
        (extended / "run.json").write_text(json.dumps(info))
    lines = (tmp_path / "out.txt").read_text().splitlines()
    assert lines[:2] == [f"run directory: {extended}", "resuming llama+yarn×2+ft@64: "
                         f"extension=yarn of {models / 'llama'} at step 2 of 4"], lines  # fmt: skip


def test_ctrl_c_while_starting_says_nothing_was_written(models, tmp_path):
    """Ctrl-C while torch and transformers load: said as training says an interrupt, exit 130,
    no run directory."""
    root = tmp_path / "out"
    started = time.time()
    proc = _posx_to_files(tmp_path, *extend_args(models, root, "extension=yarn"))
    while "run directory" not in (tmp_path / "out.txt").read_text() and proc.poll() is None:
        time.sleep(0.01)
    first = time.time() - started
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130
    err = (tmp_path / "err.txt").read_text().splitlines()
    assert err[-1] == "posx: interrupted before training began; nothing was written", err
    assert not root.exists()
    assert first < 5, first  # 0.55 s measured on a loaded 2-core machine; within 1 s idle


def test_a_config_without_a_context_is_named_by_the_plan(cli, models, tmp_path):
    """config.json without max_position_embeddings (transformers fills in its default): the
    first lines cannot name the run, the plan does, and nothing is refused for it."""
    bare = Path(shutil.copytree(models / "llama", tmp_path / "nomax"))
    cfg = json.loads((bare / "config.json").read_text())
    cfg.pop("max_position_embeddings")
    (bare / "config.json").write_text(json.dumps(cfg))
    result = cli("extend", f"hf:{bare}", "extension=yarn", f"root={tmp_path / 'out'}",
                 "--dry-run")  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"doing      extending {bare} with extension=yarn", lines
    assert lines[1].startswith(f"output     {tmp_path / 'out' / 'pretrained' / 'nomax+yarnx4'}")


def test_a_model_directory_named_without_hf_says_hf(cli, models, tmp_path):
    result = cli("extend", str(models / "llama"), "extension=yarn", f"root={tmp_path}")
    assert_one_line_error(result, 2, f"{models / 'llama'} is a Hugging Face model directory "
                                     f"(config.json), not a posx run: extend it with posx extend "
                                     f"hf:{models / 'llama'} extension=NAME")  # fmt: skip
    assert not list(tmp_path.iterdir())


def test_dry_run_prints_the_plan_and_writes_nothing(cli, models, tmp_path):
    bare = _no_weights(models, tmp_path)  # a plan needs the config alone
    plan = ["extension=yarn", "train.device=cuda", "train.world_size=8", "train.batch_size=8",
            "train.max_memory=80G", "train.checkpointing=true", "--dry-run"]  # fmt: skip
    result = cli(*extend_args(models, tmp_path / "out", *plan, model=str(bare)))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert '"rope_type": "yarn", "factor": 4.0' in out and "target 128" in out
    assert "8 on cuda (FSDP2, sharded)" in out and "bf16 mixed" in out and "fits       yes" in out
    assert not (tmp_path / "out").exists()
    # issue 57.7: where the run would go, and a tiny model's size as people write it
    assert out.startswith(f"output     {tmp_path / 'out' / 'pretrained' / 'bare+yarnx4+ft128_'}")
    assert re.search(r"\(llama, \d+\.\dK parameters", out) and "0.00B" not in out, out


@pytest.mark.slow
def test_two_processes_take_the_same_steps_as_one(models, extended, tmp_path):
    """torchrun --nproc_per_node 2 on gloo: FSDP2 shards the model, each process reads half the
    global batch (2 micro-batches each, against 4 in one process), a sharded checkpoint at
    step 2; the losses, the saved weights and the evaluation after training (rank 0 alone: it
    was refused under torchrun) match the one-process run's."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "POSX_DEBUG": "0"}
    args = extend_args(models, tmp_path, "extension=yarn", "extend.factor=2", "experiment=mine")
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--standalone", "-m", "posx", *args],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = (tmp_path / "pretrained").iterdir()
    info = json.loads((run / "run.json").read_text())
    assert info["extension"]["engine"] == "fsdp2" and info["extension"]["processes"] == 2
    two = pd.read_csv(run / "metrics.csv")["loss"]
    one = pd.read_csv(extended / "metrics.csv")["loss"]
    assert len(two) == 4 and (two - one).abs().max() < 1e-5, (two.tolist(), one.tolist())
    a = load_file(str(extended / "model" / "model.safetensors"))
    b = load_file(str(run / "model" / "model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=1e-5)
    rows_one, rows_two = (pd.read_csv(r / "eval.csv", keep_default_na=False)
                          for r in (extended, run))  # fmt: skip
    assert list(rows_two["eval_length"]) == list(rows_one["eval_length"]) == [32, 64]
    assert (rows_two["loss"] - rows_one["loss"]).abs().max() < 1e-4, (rows_one, rows_two)


def test_dry_run_of_a_local_model_needs_neither_torch_nor_transformers(models, tmp_path):
    """Issue 57: `--dry-run` took 5-9 s, importing torch and transformers to build the model on
    the meta device. A local directory's config.json and safetensors header give the same plan
    (tests/unit/pretrained/test_extend_outline.py), and neither library is imported."""
    code = ("import sys\nfrom posx.cli import main\nsys.argv = ['posx', *sys.argv[1:]]\ntry:\n"
            "    main()\nfinally:\n"
            "    print('imported', sorted({'torch', 'transformers'} & set(sys.modules)), "
            "file=sys.stderr)")  # fmt: skip
    root = tmp_path / "out"
    args = extend_args(models, root, "extension=yarn", "--dry-run", model="qwen2")
    env = {**os.environ, "POSX_DEBUG": "0", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines() == ["imported []"], proc.stderr
    out = proc.stdout.splitlines()
    assert out[0].startswith(f"output     {root / 'pretrained' / 'qwen2+yarnx4+ft128_'}"), out
    assert re.fullmatch(r"model      \S+ \(qwen2, \d+\.\dK parameters, revision dir:\w+\)", out[2])
    assert out[-1] == "fits       yes" and not root.exists()


@pytest.mark.parametrize(
    ("file", "content", "said"),
    [
        ("config.json", b'{"model_type": "llama",', " is damaged ("),
        ("model.safetensors", b"\x0a\0\0\0\0\0\0\0{not json}", " is damaged (its header is not"),
        ("model.safetensors", b"\xff" * 8, " is damaged (its header says 18446744073709551615 "),
    ],
)  # fmt: skip
def test_a_damaged_model_file_is_named_by_the_dry_run(cli, models, tmp_path, file, content, said):
    copy = Path(shutil.copytree(models / "llama", tmp_path / "damaged"))
    (copy / file).write_bytes(content)
    result = cli(*extend_args(models, tmp_path / "out", "extension=yarn", "--dry-run",
                              model=str(copy)))  # fmt: skip
    assert_one_line_error(result, 2, f"{copy / file}{said}")
    assert not (tmp_path / "out").exists()
