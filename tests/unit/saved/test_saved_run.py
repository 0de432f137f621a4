"""A saved run is opened once and each of its files read once, whichever command asks; it says
what kind of run it is; its refusals are the one-line messages the commands always gave."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from posx.errors import ConfigError, PosxError
from posx.saved import RunKind, SavedRun

_OPENED: list[Counter] = []


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _OPENED and isinstance(args[0], str | Path):
        _OPENED[-1][str(args[0])] += 1


sys.addaudithook(_audit)  # audit hooks stay for the process: it counts only inside `opened`


class opened:  # noqa: N801 - used as a context manager
    """Counts the files this process opens inside the block (Python's ``open`` audit event)."""

    def __enter__(self) -> Counter:
        _OPENED.append(Counter())
        return _OPENED[-1]

    def __exit__(self, *exc: object) -> None:
        _OPENED.pop()


RECORDS = ("run.json", ".hydra/config.yaml", "checkpoint/trainer.json")


def reads(counts: Counter, run: Path, names: tuple[str, ...] = RECORDS) -> dict[str, int]:
    resolved = {str(Path(p).resolve()): n for p, n in counts.items()}
    return {name: resolved.get(str((run / name).resolve()), 0) for name in names}


def test_posx_eval_reads_each_record_of_the_run_once(cli, copy_run):
    """`posx eval RUN` used to read .hydra/config.yaml seven times and run.json five (select,
    check, data, memory, evaluate, fingerprint, trackers each from the path)."""
    run = copy_run()
    with opened() as counts:
        result = cli("eval", str(run), "--lengths", "16,32", "--no-progress")
    assert result.returncode == 0, result.stderr
    assert reads(counts, run) == dict.fromkeys(RECORDS, 1)


def test_posx_eval_of_a_root_reads_each_record_once(cli, copy_run, tmp_path):
    runs = [copy_run("a"), copy_run("b")]
    with opened() as counts:
        result = cli("eval", "--root", str(tmp_path), "--lengths", "16", "--no-progress")
    assert result.returncode == 0, result.stderr
    for run in runs:
        assert reads(counts, run) == dict.fromkeys(RECORDS, 1), run.name


def test_extend_checks_read_the_parents_records_once(cli, copy_run):
    """Every check of `posx extend` runs before the refusal of a shape change (the last); it
    composes the parent's overrides, so its saved config is not read at all."""
    run = copy_run()
    with opened() as counts:
        result = cli("extend", str(run), "model.d_ff=96")
    assert result.returncode == 2 and "changes the shape of" in result.stderr, result.stderr
    names = (*RECORDS, ".hydra/overrides.yaml", ".hydra/hydra.yaml")
    assert reads(counts, run, names) == {**dict.fromkeys(names, 1), ".hydra/config.yaml": 0}


def test_answers_are_kept_and_refusals_repeat(copy_run):
    run = SavedRun(copy_run())
    assert run.config is run.config and run.info is run.info
    first = run.loadable_config(["encoding.base=500"])
    first.encoding.base = 1  # the caller's copy; the run's answer stays
    assert run.loadable_config(["encoding.base=500"]).encoding.base == 500
    (run.path / "run.json").write_text("{")
    damaged = SavedRun(run.path)
    for _ in range(2):  # a refusal is not kept as an answer: asking again says it again
        with pytest.raises(PosxError, match=r"run\.json is damaged"):
            _ = damaged.info
    assert damaged.recorded == {} and damaged.info_error


def test_what_a_directory_that_is_no_run_says(tmp_path):
    run = SavedRun(tmp_path / "missing")
    assert not run.is_run() and not run.has_checkpoint()
    with pytest.raises(ConfigError, match="run directory does not exist"):
        _ = run.config
    with pytest.raises(ConfigError, match="run directory does not exist"):  # not "no overrides"
        _ = run.overrides
    (tmp_path / "missing").mkdir()
    with pytest.raises(ConfigError, match=r"no \.hydra/overrides\.yaml"):
        _ = SavedRun(tmp_path / "missing").overrides
    run = SavedRun(tmp_path / "missing")
    with pytest.raises(ConfigError, match=r"no run\.json"):
        _ = run.info
    assert run.info_if_any == {} and run.recorded_config is None and run.fingerprint == ""


@pytest.mark.parametrize(
    ("record", "kind"),
    [
        ({"status": "trained"}, RunKind.TRAINED),
        ({"status": "trained", "parent": {"run": "base"}}, RunKind.EXTENSION),
        ({"status": "pretrained", "pretrained": {"id": "m"}}, RunKind.PRETRAINED),
        (
            {"status": "trained", "pretrained": {"id": "m"}, "parent": {"model": "m"}},
            RunKind.PRETRAINED_EXTENSION,
        ),
    ],
)
def test_kind_comes_from_run_json(tmp_path, record, kind):
    (tmp_path / "run.json").write_text(json.dumps(record))
    run = SavedRun(tmp_path)
    assert run.kind is kind
    assert (run.parent is not None) == ("parent" in record)


def test_a_real_extension_and_a_pretrained_record_say_their_kind(copy_run):
    run = SavedRun(copy_run())
    assert run.kind is RunKind.TRAINED
    info = json.loads((run.path / "run.json").read_text())
    info["parent"] = {"run": "base", "fingerprint": "f"}
    (run.path / "run.json").write_text(json.dumps(info))
    assert SavedRun(run.path).kind is RunKind.EXTENSION


def test_the_python_api_takes_an_opened_run(copy_run):
    import posx

    run = SavedRun(copy_run())
    rows = posx.evaluate(run, [16], device="cpu")
    assert list(rows["eval_length"]) == [16] and (run.path / "eval.csv").is_file()


def test_a_corpus_edited_in_the_same_session_is_refused_by_posx_evaluate(tmp_path):
    """In one Python session (a notebook), posx.evaluate after editing the corpus used to take
    the bytes kept from training and score other text under the run's name."""
    import posx

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 200)
    cfg = posx.compose(
        "task=text", f"task.corpus={corpus}", "model.d_model=16", "model.n_heads=2",
        "model.n_layers=1", "model.d_ff=32", "train.length=16", "train.steps=2",
        "train.batch_size=2", "train.warmup_steps=1", "train.progress=false",
        "eval.lengths=[16]", "eval.tokens=64", f"root={tmp_path}",
    )  # fmt: skip
    run = posx.train(cfg)
    corpus.write_text("a different text that the run never saw, the same size? " * 160)
    with pytest.raises(PosxError, match="has changed since the run was trained"):
        posx.evaluate(run, [16], device="cpu")
