"""``posx eval hf:NAME_OR_DIR`` as a user types it: a pretrained model's run is read by
``posx report``, ``posx runs`` and ``posx check`` like any run; loading it runs no one's code;
every failure is one line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import claims_config
from tests.integration.test_cli_errors import assert_one_line_error
from tests.unit.pretrained.tiny_models import model_root, offline_hub

SMALL = ["task.val_fraction=0.5", "eval.tokens=128"]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    return model_root(tmp_path_factory.mktemp("hf_cli"), ("llama", "gpt2"))


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    offline_hub(monkeypatch, tmp_path / "hf_home")


def hf_eval(posx, models, root, *args, model: str | Path = "llama", progress=False):
    """``posx eval hf:MODELS/model`` on the test corpus (``posx``: in a subprocess or the
    ``cli`` fixture, in process)."""
    corpus = f"task.corpus={models / 'corpus.txt'}"
    quiet = [] if progress else ["--no-progress"]
    return posx("eval", f"hf:{models / model}", "--root", str(root), corpus, *SMALL, *quiet, *args)


def test_report_runs_and_check_read_a_pretrained_run_beside_a_posx_run(cli, models, tmp_path):
    def posx(*args, check=False):
        proc = cli(*args)
        assert not check or proc.returncode == 0, proc.stderr
        return proc

    root = tmp_path / "results"
    posx("train", "task=text", f"task.corpus={models / 'corpus.txt'}", "task.val_fraction=0.5",
         "encoding=rope", "model.d_model=16", "model.n_heads=2", "model.n_layers=1",
         "model.d_ff=32", "train.length=32", "train.steps=2", "train.batch_size=2",
         "train.warmup_steps=1", "train.progress=false", "eval.lengths=[32,64]",
         "eval.tokens=128", f"root={root}", check=True)  # fmt: skip
    proc = hf_eval(posx, models, root, "--lengths", "32,64", "--variant", "none", "--variant",
                   "yarn:2", "label=tinyllama", "experiment=mine")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (run,) = (root / "pretrained").iterdir()
    info = json.loads((run / "run.json").read_text())
    assert info["pretrained"]["revision"].startswith("dir:") and info["train_length"] == 32
    assert info["pretrained"]["tokenizer"]["sha256"] and info["pretrained"]["dtype"] == "fp32"
    rows = pd.read_csv(run / "eval.csv", keep_default_na=False)
    assert set(rows["encoding"]) == {"tinyllama"} and len(rows) == 4
    assert (rows["bpb"].astype(float) > 0).all() and set(rows["precision"]) == {"fp32"}

    listing = posx("runs", "--root", str(root), "--format", "json", check=True)
    kinds = {(r["encoding"], r["model"], r["status"]) for r in json.loads(listing.stdout)}
    assert ("tinyllama", "pretrained", "pretrained") in kinds and len(kinds) == 2

    report = posx("report", "--root", str(root), "--by", "model", "--format", "json", "--task",
                  "text", check=True)  # fmt: skip
    cells = pd.DataFrame(json.loads(report.stdout)["cells"])
    assert set(cells["variant"]) == {"tinyllama", "tinyllama+yarn×2", "rope"}
    # One column holds one unit: the byte-level posx run's L=32 is 32 bytes, the pretrained
    # model's 32 of its BPE tokens, so they sit in two tables, each titled with its unit.
    # The model's tokens are named by its tokenizer (issue 55.7: a posx BPE run's L=128 and a
    # pretrained model's were both "tokens" in one column): rows record it, tables split by it.
    units = dict(zip(cells["variant"], cells["length_unit"], strict=False))
    own = f"tokens (tokenizer {info['pretrained']['tokenizer']['sha256'][:8]})"
    assert units == {"tinyllama": own, "tinyllama+yarn×2": own, "rope": "bytes"}
    assert set(rows["length_unit"]) == {own}
    md = posx("report", "--root", str(root), "--by", "model,train_length", "--format", "md",
              check=True).stdout  # fmt: skip
    (table,) = [t for t in md.split("\n\n") if "tinyllama · model=pretrained" in t]
    assert "rope · model=tiny" not in table, md
    (other,) = [t for t in md.split("\n\n") if "rope · model=tiny" in t]
    titles = [t for t in md.split("\n\n") if t.startswith("**text · lengths in")]
    assert [t.split(" · ")[1] for t in titles] == ["lengths in bytes", f"lengths in {own}"], md
    assert "| L=32 |" in table, table  # still headed L=: the title says what it counts
    # Rows written before a text task recorded its unit say tokens, or have no unit column:
    # the run's saved config (task.tokenizer=byte) still reads them as bytes.
    (mine,) = (root / "runs").glob("*/eval.csv")
    written = pd.read_csv(mine, keep_default_na=False)
    for legacy in (written.assign(length_unit="tokens"), written.drop(columns="length_unit")):
        legacy.to_csv(mine, index=False)
        again = posx("report", "--root", str(root), "--by", "model", "--format", "json", "--task",
                     "text", check=True)  # fmt: skip
        cells = pd.DataFrame(json.loads(again.stdout)["cells"])
        assert set(cells.loc[cells["variant"] == "rope", "length_unit"]) == {"bytes"}
    written.to_csv(mine, index=False)
    # a pretrained run evaluated before its rows named the tokenizer: its run.json does
    hf_rows = pd.read_csv(run / "eval.csv", keep_default_na=False)
    hf_rows.drop(columns="length_unit").to_csv(run / "eval.csv", index=False)
    again = posx("report", "--root", str(root), "--by", "model", "--format", "json", "--task",
                 "text", check=True)  # fmt: skip
    cells = pd.DataFrame(json.loads(again.stdout)["cells"])
    assert set(cells.loc[cells["variant"] == "tinyllama", "length_unit"]) == {own}
    hf_rows.to_csv(run / "eval.csv", index=False)
    posx("report", "--root", str(root), "-o", str(tmp_path / "r.html"), check=True)
    page = (tmp_path / "r.html").read_text()
    assert f"pretrained/{run.name}/run.json" in page  # its record, as it has no saved config
    assert f"pretrained/{run.name}/.hydra" not in page

    claims_config(tmp_path / "conf",
                  "  - id: finite\n    table: t\n    statement: tinyllama < 1000 at 1x by bpb\n"
                  "  - id: impossible\n    table: t\n    statement: tinyllama+yarn×2 < 0 at 2x "
                  "by bpb\n", paper="a pretrained model's own claims")  # fmt: skip
    check = posx("--config-dir", str(tmp_path / "conf"), "check", str(root), "--min-seeds", "1",
                 "--format", "json")  # fmt: skip
    verdicts = {c["claim"]: c["verdict"] for c in json.loads(check.stdout)["claims"]}
    assert verdicts == {"finite": "holds", "impossible": "fails"}, check.stdout + check.stderr
    assert check.returncode == 1


def test_sliding_buckets_passkey_bf16_and_device_map(cli, models, tmp_path):
    posx = cli
    proc = hf_eval(posx, models, tmp_path, "--lengths", "64,256", "--mode", "sliding",
                   "--window", "16", "--stride", "8", "--buckets", "8", "--dtype", "bf16",
                   "--passkey", "--device-map", "auto", "passkey.trials=1",
                   "passkey.depths=[0,1]", progress=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "text L=64" in proc.stderr and "passkey L=256" in proc.stderr  # a line per length
    (run,) = (tmp_path / "pretrained").iterdir()
    rows = pd.read_csv(run / "eval.csv", keep_default_na=False)
    text = rows[rows["task"] == "text"].iloc[0]
    assert (text["mode"], text["window"], text["stride"], text["precision"]) == (
        "sliding", 16, 8, "bf16")  # fmt: skip
    keyed = rows[(rows["task"] == "passkey") & (rows["eval_length"] == 256)].iloc[0]
    assert keyed["status"] == "ok" and float(keyed["sequences"]) == 2
    assert {"exact_depth_0", "exact_depth_100", "loss_depth_0", "loss_depth_100"} <= set(rows)
    buckets = pd.read_csv(run / "eval_positions.csv")
    assert set(buckets["bucket_end"] - buckets["bucket_start"]) == {8}
    info = json.loads((run / "run.json").read_text())["pretrained"]
    assert info["device_map"] == "auto" and info["dtype"] == "bf16"
    fp32 = hf_eval(posx, models, tmp_path / "fp32", "--lengths", "64", "--mode", "sliding",
                   "--window", "16", "--stride", "8")  # fmt: skip
    (other,) = (tmp_path / "fp32" / "pretrained").iterdir()
    ref = pd.read_csv(other / "eval.csv").iloc[0]  # L=64
    assert fp32.returncode == 0 and abs(ref["loss"] - float(text["loss"])) < 0.05  # bf16 ran, close


def test_gpt2_past_its_table_is_an_unsupported_row(cli, models, tmp_path):
    """Also: two models in one command, each its own run."""
    proc = hf_eval(cli, models, tmp_path, "--lengths", "32,64", f"hf:{models / 'llama'}",
                   model="gpt2")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "L=64  unsupported: gpt2 has learned positions for 32 tokens only" in proc.stdout
    runs = sorted(p.name.split("_")[0] for p in (tmp_path / "pretrained").iterdir())
    assert runs == ["gpt2", "llama"]


def plant(models: Path, where: Path, marker: Path, *, tokenizer: bool = False) -> Path:
    """A model directory whose custom code would write ``marker`` when imported."""
    import shutil

    shutil.copytree(models / "llama", where)
    (where / "evil.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
        "from transformers import LlamaConfig, LlamaForCausalLM\n"
        "class EvilConfig(LlamaConfig):\n    model_type = 'evil'\n"
        "class EvilModel(LlamaForCausalLM):\n    config_class = EvilConfig\n"
    )
    auto = {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}
    name = "tokenizer_config.json" if tokenizer else "config.json"
    data = json.loads((where / name).read_text())
    data["auto_map"] = {"AutoTokenizer": ["evil.EvilConfig", None]} if tokenizer else auto
    if not tokenizer:
        data["model_type"] = "evil"
    (where / name).write_text(json.dumps(data))
    return where


@pytest.mark.parametrize("tokenizer", [False, True], ids=["config", "tokenizer_config"])
def test_custom_code_never_runs_unless_named(cli, posx, models, tmp_path, tokenizer):
    marker = tmp_path / "marker"
    evil = plant(models, tmp_path / "evil", marker, tokenizer=tokenizer)
    for extra in ([], ["--trust-remote-code", "someone/else"]):
        proc = hf_eval(cli, models, tmp_path, "--lengths", "16", *extra, model=evil)
        assert_one_line_error(proc, 2, f"--trust-remote-code {evil}")
        assert "asks to run its own code" in proc.stderr
        assert not marker.exists()
    assert not (tmp_path / "pretrained").exists()  # nothing half-made
    if not tokenizer:  # named: the user allowed this model's code, and it ran (a subprocess)
        proc = hf_eval(posx, models, tmp_path, "--lengths", "16", "--trust-remote-code",
                       str(evil), model=evil)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert marker.read_text() == "ran"


def test_pickle_weights_load_weights_only(cli, models, tmp_path):
    """pytorch_model.bin loads through the weights-only unpickler: a plain state dict works, a
    pickle that would run code is refused in one line and runs nothing."""
    import torch
    from safetensors.torch import load_file

    marker = tmp_path / "marker"
    plain = tmp_path / "plain"
    plain.mkdir()
    for f in (models / "llama").iterdir():
        if f.suffix != ".safetensors":
            (plain / f.name).write_bytes(f.read_bytes())
    state = load_file(models / "llama" / "model.safetensors")
    torch.save(state, plain / "pytorch_model.bin")
    ok = hf_eval(cli, models, tmp_path / "r1", "--lengths", "16", model=plain)
    assert ok.returncode == 0, ok.stderr
    info = json.loads(next((tmp_path / "r1").rglob("run.json")).read_text())
    assert info["pretrained"]["weights"] == "pickle"

    class Evil:
        def __reduce__(self):
            return (Path.write_text, (marker, "ran"))

    torch.save({"model.embed_tokens.weight": Evil()}, plain / "pytorch_model.bin")
    bad = hf_eval(cli, models, tmp_path / "r2", "--lengths", "16", model=plain)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and "cannot load the weights" in bad.stderr
    assert not marker.exists()


def test_missing_gated_and_weightless_models_are_one_line(cli, models, tmp_path, monkeypatch):
    proc = cli("eval", "hf:nobody/no-such-model", "--root", str(tmp_path))
    assert_one_line_error(proc, 2, "not in the local Hugging Face cache (HF_HUB_OFFLINE is set)")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    proc = cli("eval", "hf:nobody/no-such-model", "--root", str(tmp_path), "--revision", "v1")
    assert_one_line_error(proc, 2, "(downloads are off); pass --allow-download")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text((models / "llama" / "config.json").read_text())
    assert_one_line_error(cli("eval", f"hf:{empty}"), 2, "holds no weights")
    assert_one_line_error(cli("eval", f"hf:{tmp_path}"), 2, "holds no config.json")

    import huggingface_hub
    from huggingface_hub.errors import GatedRepoError

    def gated(*args, **kwargs):
        err = GatedRepoError.__new__(GatedRepoError)  # as the hub raises it, without a response
        Exception.__init__(err, "401 gated")
        raise err

    monkeypatch.setattr(huggingface_hub, "snapshot_download", gated)
    proc = cli("eval", "hf:meta-llama/Llama-3.2-1B", "--allow-download")
    assert_one_line_error(proc, 2, "model meta-llama/Llama-3.2-1B is gated")


def test_missing_transformers_names_the_extra(cli, monkeypatch, models):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers fails
    proc = cli("eval", f"hf:{models / 'llama'}")
    extra = "needs the transformers library: pip install 'posx[transformers]'"
    assert_one_line_error(proc, 2, extra)


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--max-memory", "1M"], "needs about"),
        (["--variant", "rerope:2"], "--variant 'rerope:2'"),
        (["--mode", "strided"], "unknown --mode 'strided'"),
        (["eval.tokns=5"], "has no setting 'eval.tokns'"),
        (["passkey.depths=[2]"], "passkey.depths must be a list of numbers in [0, 1]"),
        (["--dtype", "fp8"], "unknown --dtype 'fp8'"),
    ],
)
def test_bad_pretrained_input_is_one_line(cli, models, tmp_path, args, text):
    proc = cli("eval", f"hf:{models / 'llama'}", "--root", str(tmp_path), "--lengths", "16",
               *args)  # fmt: skip
    assert_one_line_error(proc, 2, text)
    assert not (tmp_path / "pretrained").exists()


def test_pretrained_options_on_a_posx_run_are_refused(cli, tmp_path):
    proc = cli("eval", str(tmp_path), "--variant", "yarn:2")
    assert_one_line_error(proc, 2, "apply to pretrained models (posx eval hf:NAME_OR_DIR)")


def test_a_cached_model_is_found_offline_and_records_its_commit(cli, models, tmp_path, monkeypatch):
    """``hf:ORG/NAME`` from the local cache (laid out as the hub client lays it out): the run
    records the snapshot's commit hash."""
    import shutil

    from huggingface_hub import constants

    commit = "0123456789abcdef0123456789abcdef01234567"
    hub = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))  # read when called, in process
    repo = hub / "models--tiny--llama"
    shutil.copytree(models / "llama", repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    proc = cli("eval", "hf:tiny/llama", "--root", str(tmp_path),
               f"task.corpus={models / 'corpus.txt'}", *SMALL, "--no-progress")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (run,) = (tmp_path / "pretrained").iterdir()
    # without --lengths: the trained context and twice that
    assert pd.read_csv(run / "eval.csv")["eval_length"].tolist() == [32, 64]
    assert run.name == f"llama_{commit[:12]}"
    info = json.loads((run / "run.json").read_text())["pretrained"]
    assert info["revision"] == commit and info["model_id"] == "tiny/llama"
    missing = cli("eval", "hf:tiny/llama", "--revision", "v2", "--root", str(tmp_path))
    assert_one_line_error(missing, 2, "model tiny/llama is not a directory and not in the local")


def test_report_takes_every_task_and_metric_a_root_holds(cli, models, tmp_path):
    """`posx report --task passkey --metric exact_match` (docs/pretrained.md's command) ended in a
    pandas traceback when no position bucket was left to plot; a passkey cell read -0.000."""
    root = tmp_path / "results"
    proc = hf_eval(cli, models, root, "--lengths", "64,128", "--passkey", "passkey.trials=1",
                   "passkey.depths=[0,1]")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (run,) = (root / "pretrained").iterdir()
    rows = pd.read_csv(run / "eval.csv")
    recorded = ("loss", "ppl", "bpb", "acc", "exact_match", "exact_depth_100")
    for task, part in rows[rows["status"] == "ok"].groupby("task"):
        for metric in (m for m in recorded if m in part and part[m].notna().all()):
            for plot in ([], ["--plot", str(tmp_path / f"plots_{task}_{metric}")]):
                args = ("report", "--root", str(root), "--task", task, "--metric", metric, *plot)
                result = cli(*args)
                assert result.returncode == 0, (args, result.stderr)
                assert "-0.000" not in result.stdout and "×-0" not in result.stdout, args
