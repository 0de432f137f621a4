"""Bad input: one line on stderr naming what was wrong, a non-zero exit, no traceback."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import TINY

TRAIN_ERRORS = [
    (["encoding=nosuch"], "unknown encoding 'nosuch'; choose from: abacus, alibi"),
    (["task=nosuch"], "unknown task 'nosuch'; choose from:"),
    (["model=huge"], "unknown model 'huge'; choose from: small, tiny"),
    (["-m", "encoding=rope,nosuch"], "unknown encoding 'nosuch'"),
    (["model.d_model=30"], "must be divisible by model.n_heads"),
    (["model.d_modle=30"], "d_modle"),
    (["train.steps=abc"], "train.steps must be an integer, got 'abc'"),
    (["train.lr=abc"], "train.lr must be a number, got 'abc'"),
    (["train.progress=abc"], "train.progress must be true or false, got 'abc'"),
    (["-m", "train.steps=1,abc"], "train.steps must be an integer, got 'abc'"),
    (["train.length=0"], "train.length must be positive"),
    (["eval.lengths=[64,0]"], "eval.lengths must be positive integers"),
    (["model.d_model=24", "encoding=rope", "encoding.rotary_fraction=0.5"], "rotary dimension"),
    (["task=text", "task.corpus=/nonexistent/corpus.txt"], "corpus path does not exist"),
    (["encoding.bse=3"], "'bse'"),
    (["encoding._target_=nosuch.Encoding"], "cannot be loaded: No module named 'nosuch'"),
    # positions that read numbers, and Abacus's table of digit places, on what has none: they
    # trained plain positions under the label rope+coupling
    (["task=text", "positions=coupling"], "positions=coupling places each digit by its number"),
    (["task=copy", "positions=abacus"], "task CopyTask has no numbers to read"),
    (["-m", "task=arithmetic,text", "positions=coupling"], "task TextTask has no numbers"),
    (["task=arithmetic", "encoding=abacus"], "positions=default does not give it"),
]


def assert_one_line_error(proc, code: int, text: str) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = [x for x in proc.stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("posx: error:") and text in lines[0], lines[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("args", "text"), TRAIN_ERRORS, ids=[" ".join(a) for a, _ in TRAIN_ERRORS])
def test_bad_train_input(cli, tmp_path, args, text):
    proc = cli("train", f"root={tmp_path}", "train.steps=1", *args)
    assert_one_line_error(proc, 2, text)
    assert not (tmp_path / "runs").exists()  # nothing half-made


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("sweep", [[], ["-m", "seed=0,1"]])
def test_a_device_this_machine_lacks_is_refused_before_any_run_folder(cli, tmp_path, sweep):
    """train.device=cuda without CUDA: one line, exit 2, no run folder (it used to make one and
    fail inside it with exit 1, and `posx runs` then listed a `failed ? ? ?` row)."""
    proc = cli("train", *TINY, f"root={tmp_path}", "train.device=cuda", *sweep)
    assert_one_line_error(proc, 2, "train.device=cuda but CUDA is not available")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("lengths", "text"),
    [
        ("0,16", "positive integers"),
        ("16,abc", "comma-separated"),
        ("32,16", "strictly increasing"),
    ],
)
def test_bad_eval_lengths(cli, tmp_path, lengths, text):
    assert_one_line_error(cli("eval", "--root", str(tmp_path), "--lengths", lengths), 2, text)


def test_resume_of_a_missing_run_says_it_does_not_exist(cli, tmp_path):
    assert_one_line_error(cli("resume", str(tmp_path / "nonexistent")), 2,
                          f"run directory does not exist: {tmp_path / 'nonexistent'}")  # fmt: skip


def test_eval_of_missing_run_dir(cli, tmp_path):
    assert_one_line_error(cli("eval", str(tmp_path / "nope")), 2, "run directory does not exist")


def test_eval_of_run_without_checkpoint(cli, tmp_path):
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("seed: 0\n")
    (run / "run.json").write_text("{}")
    assert_one_line_error(cli("eval", str(run)), 1, "run has no checkpoint")


def test_report_on_empty_or_missing_root(cli, tmp_path):
    assert_one_line_error(cli("report", "--root", str(tmp_path)), 2, "no eval.csv found")
    assert_one_line_error(
        cli("report", "--root", str(tmp_path / "x")), 2, "results root does not exist"
    )


def test_error_through_the_real_entry_point(posx, tmp_path):
    """The console script itself (not just main()) exits 2 with one line."""
    assert_one_line_error(posx("train", f"root={tmp_path}", "encoding=nosuch"), 2, "choose from")


def test_misspelled_eval_override(cli, tiny_overrides, tmp_path):
    assert cli("train", "encoding=rope", *tiny_overrides).returncode == 0
    run = next(tmp_path.rglob("run.json")).parent
    before = (run / "eval.csv").read_bytes()
    assert_one_line_error(cli("eval", str(run), "encoding.bse=4"), 2, "'bse'")
    assert_one_line_error(cli("eval", str(run), "--lengths", "16", "stray"), 2, "does not exist")
    assert (run / "eval.csv").read_bytes() == before  # nothing lost or half-written


# --- issue 35: say what a path or an override is, and what to write instead ---------------------


def test_eval_of_a_folder_of_runs_or_a_checkpoint_says_what_it_is(cli, copy_run, tmp_path):
    """Issue 35.2: a results root, a sweep directory, a run's checkpoint folder or a file in a run
    was "run has no checkpoint: results (train it first, ...)", exit 1."""
    import shutil

    run = copy_run("a")
    copy_run("b")
    root = tmp_path / "runs"
    assert_one_line_error(
        cli("eval", str(root)), 2,
        f"{root} is a results root with 2 runs, not one run: use `posx eval --root {root}`",
    )  # fmt: skip
    sweep = tmp_path / "sweep"
    shutil.copytree(run, sweep / "copy_rope_0")
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    assert_one_line_error(cli("eval", str(sweep)), 2, f"{sweep} is a sweep directory with 1 run,")
    assert_one_line_error(
        cli("eval", str(run / "checkpoint")), 2,
        f"{run / 'checkpoint'} is a run's checkpoint folder; pass the run: posx eval {run}",
    )  # fmt: skip
    inside = f"is a file inside a run; pass the run: posx eval {run}"
    assert_one_line_error(cli("eval", str(run / "run.json")), 2, inside)


def test_eval_of_an_hf_name_missing_from_the_cache_says_so(cli, tmp_path, monkeypatch):
    """Issue 35.4: was "run directory does not exist: hf:gpt2"; since issue 32 `hf:NAME` is a
    pretrained model, and one that is not cached is one line (nothing downloads unasked)."""
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # an empty cache
    proc = cli("eval", "hf:gpt2", "--root", str(tmp_path))
    assert_one_line_error(proc, 2, "model gpt2 is not a directory and not in the local Hugging")
    assert "--allow-download" in proc.stderr


OVERRIDE_MISTAKES = [
    (["--encoding", "alibi"], "posx train has no option --encoding; settings are key=value: "
     "encoding=alibi"),
    (["--steps=5"], "posx train has no option --steps; settings are key=value: train.steps=5"),
    (["encoding:alibi"], "'encoding:alibi' is not an override: settings are key=value: "
     "encoding=alibi"),
    (["alibi"], "'alibi' is not an override: settings are key=value: encoding=alibi"),
    (["eval.lengths=32,64"], "eval.lengths takes a list: write eval.lengths=[32,64] (without "
     "brackets, 32,64 is a sweep"),
    (["-m", "eval.lengths=32,64"], "eval.lengths takes a list: write eval.lengths=[32,64]"),
    (["eval.lengths=[32,64"], "bad override 'eval.lengths=[32,64': no viable alternative"),
    (["encoding=alibi", "encoding.scaling.type=yarn"],
     "unknown setting 'encoding.scaling.type'; encoding (posx.encodings.alibi.ALiBi) has no "
     "setting 'scaling'; encoding keys: none (n_heads comes from the model); encoding options "
     "with 'scaling': rope"),
    (["model.d_modle=30"], "unknown setting 'model.d_modle'; did you mean 'model.d_model'?"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "text"), OVERRIDE_MISTAKES, ids=[" ".join(a) for a, _ in OVERRIDE_MISTAKES]
)
def test_override_mistakes_at_train_time_say_what_to_write(cli, tmp_path, args, text):
    """Issue 35.3: these reached the user as Hydra's words ("Error parsing override 'alibi'",
    "int is not a ListConfig", "Key 'scaling' is not in struct")."""
    proc = cli("train", f"root={tmp_path}", "train.steps=1", *args)
    assert_one_line_error(proc, 2, text)
    for hydra_words in ("Error parsing", "ListConfig", "not in struct", "Could not override"):
        assert hydra_words not in proc.stderr, proc.stderr
    assert not (tmp_path / "runs").exists()


def test_override_mistakes_at_eval_time_say_what_to_write(cli, tiny_overrides, tmp_path):
    """Issue 35.3, eval: `eval.lengths=32,64`, `--encoding`, `encoding:alibi`, another encoding
    and a setting the run's encoding does not have; `eval.lengths=[32]` means --lengths 32."""
    assert cli("train", "encoding=alibi", *tiny_overrides, "train.steps=5").returncode == 0
    run = next(tmp_path.rglob("run.json")).parent
    before = (run / "eval.csv").read_bytes()
    cases = [
        (["eval.lengths=32,64"], "a list is written in brackets, eval.lengths=[32,64], or "
         "--lengths 32,64"),
        (["--encoding", "alibi"], "posx eval has no option --encoding (see `posx eval --help`): "
         "a run is evaluated with the encoding it was trained with"),
        (["encoding:alibi"], "'encoding:alibi' is neither a run directory nor an override"),
        (["encoding=rope"], "posx eval cannot change a run's encoding (encoding=rope)"),
        (["encoding.scaling.type=yarn"], "encoding (posx.encodings.alibi.ALiBi) has no setting "
         "'scaling'; encoding keys: none (n_heads comes from the model); encoding options with "
         "'scaling': rope"),
        (["--lengths", "16", "eval.lengths=[32]"], "--lengths and eval.lengths=[32] disagree"),
    ]  # fmt: skip
    for args, text in cases:
        assert_one_line_error(cli("eval", str(run), *args), 2, text)
    assert (run / "eval.csv").read_bytes() == before
    proc = cli("eval", str(run), "eval.lengths=[32]", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    import pandas as pd

    rows = pd.read_csv(run / "eval.csv", keep_default_na=False)
    new = rows[rows["eval_length"] == 32]
    assert len(new) == 1 and new["overrides"].tolist() == [""]  # --lengths, not a variant


def test_eval_prints_one_aligned_table_per_run(cli, copy_run):
    """Issue 35.7: was `L=64: 0.000 exact_match (fraction of sequences)` per length on one
    wrapped line; now training's table: the metric and unit once, one line per length."""
    run = copy_run("a")
    proc = cli("eval", str(run), "--lengths", "16,32,64", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    at = lines.index(run.name)
    assert lines[at + 1] == "eval: exact match [fraction of sequences]"
    table = lines[at + 2 : at + 5]
    assert [line.split()[0] for line in table] == ["L=16", "L=32", "L=64"], lines
    assert len({line.rindex(" ") for line in table}) == 1  # the values start in one column
    assert all(len(line) <= 80 for line in lines)
    assert "exact_match (fraction" not in proc.stdout


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["encoding:alibi"], "'encoding:alibi' is not an override: settings are key=value: "
         "encoding=alibi"),
        (["--encoding", "alibi"], "posx show-config has no option --encoding; settings are "
         "key=value: encoding=alibi"),
        (["eval.lengths=32,64"], "a list is written in brackets, eval.lengths=[32,64]"),
    ],
)  # fmt: skip
def test_show_config_says_what_to_write_too(cli, args, text):
    """Issue 35.3 in `posx show-config` (was "Error parsing override", "LexerNoViableAlt-
    Exception: --encoding", "Ambiguous value for argument")."""
    assert_one_line_error(cli("show-config", *args), 2, text)


@pytest.mark.parametrize(
    "settings",
    [
        ["encoding.scaling.factor=four"],  # scaling off: accepted, and a row labelled with it
        ["encoding.scaling.type=yarn", "encoding.scaling.factor=four"],  # '>=' str and float
        ["encoding.scaling.type=linear", "encoding.scaling.original_length=long"],
    ],
)
def test_an_eval_time_setting_of_the_wrong_type_is_refused_without_a_row(cli, copy_run, settings):
    run = copy_run()
    before = (run / "eval.csv").read_text()
    proc = cli("eval", str(run), "--lengths", "32", "--no-progress", *settings)
    key = settings[-1].split("=")[0].removeprefix("encoding.scaling.")
    assert_one_line_error(proc, 2, f"RoPE scaling {key} must be")
    assert (run / "eval.csv").read_text() == before


@pytest.mark.parametrize(
    ("setting", "text"),
    [
        ("encoding.base=abc", "encoding.base must be a number, got 'abc'"),
        ("encoding.rotary_fraction=half", "encoding.rotary_fraction must be a number"),
    ],
)
def test_an_encoding_setting_of_the_wrong_type_says_what_it_must_be(cli, copy_run, setting, text):
    """It failed inside the class as `'<=' not supported between instances of 'str' and
    'float'`; posx train and posx eval now name the setting."""
    run = copy_run()
    assert_one_line_error(cli("eval", str(run), "--lengths", "32", setting), 2, text)
    assert_one_line_error(cli("train", f"root={run.parent}", "train.steps=1", setting), 2, text)


@pytest.mark.parametrize("setting", ["train.lr=5", "seed=3", "train.steps=9",
                                     "model.embed_init_std=1.0"])  # fmt: skip
def test_an_eval_time_setting_only_training_reads_is_refused_without_a_row(cli, copy_run,
                                                                           setting):  # fmt: skip
    """It was accepted, evaluated the same weights and left a row `rope+train.lr=5` with the
    run's own numbers: a variant that is none."""
    run = copy_run()
    before = (run / "eval.csv").read_text()
    proc = cli("eval", str(run), "--lengths", "32", "--no-progress", setting)
    key = setting.split("=")[0]
    assert_one_line_error(proc, 2, f"bad eval override '{setting}': {key} is read only while")
    assert (run / "eval.csv").read_text() == before
