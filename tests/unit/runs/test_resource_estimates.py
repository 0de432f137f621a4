"""Memory estimates from a model's shape (posx.runs.resources), built on the meta device."""

from __future__ import annotations

import logging

import pytest
import torch

from posx.config.build import build_model
from posx.config.compose import compose
from posx.encodings.base import PositionalEncoding
from posx.errors import ConfigError
from posx.model.attention import FLEX_AVAILABLE
from posx.runs.preflight import check_memory
from posx.runs.resources import (
    ModelShape,
    available_bytes,
    check_fits,
    eval_bytes,
    model_for_estimates,
    train_step_bytes,
)
from posx.runs.sizes import gib, parse_size


def shape_of(*overrides: str) -> ModelShape:
    cfg = compose(["task=copy", *overrides])
    with torch.device("meta"):  # nothing allocated, whatever the sizes
        return ModelShape.of(build_model(cfg, vocab_size=20))


def test_a_meta_model_gives_the_shape_without_allocating():
    shape = shape_of("encoding=learned", "train.length=1000000000")
    assert shape.params > 64 * 10**9  # the learned table alone: 10^9 x d_model
    assert train_step_bytes(shape, 32, 10**9) > 2**40


def test_linear_attention_grows_linearly_and_own_attention_quadratically():
    rope, shaw = shape_of("encoding=rope"), shape_of("encoding=shaw")

    def grow(shape: ModelShape, length: int) -> int:
        return train_step_bytes(shape, 8, 2 * length) - train_step_bytes(shape, 8, length)

    assert grow(rope, 8192) == pytest.approx(2 * grow(rope, 4096))
    assert grow(shaw, 8192) > 3.5 * grow(shaw, 4096)  # the kept scores dominate


def test_encodings_declare_what_their_attention_keeps():
    assert shape_of("encoding=cope").score_bytes > shape_of("encoding=shaw").score_bytes
    assert shape_of("encoding=transformer_xl").block == 256  # query blocks (issue 18)
    assert shape_of("encoding=rope").block == 256


def test_eval_counts_one_batch_of_windows_and_the_whole_eval_set():
    shape = shape_of("encoding=rope")
    one = eval_bytes(shape, 1024, 16, 1024, 8192)
    assert eval_bytes(shape, 1024, 32, 1024, 8192) > one  # more held-out sequences
    assert eval_bytes(shape, 1024, 16, 1024, 16384) > one  # more windows per forward pass


@pytest.mark.parametrize(
    ("text", "size"),
    [("12G", 12 * 2**30), ("1.5GiB", 3 * 2**29), ("512m", 512 * 2**20), ("4096", 4096),
     (" 2 TB ", 2 * 2**40), (None, None), ("", None)],
)  # fmt: skip
def test_sizes(text, size):
    assert parse_size(text, "--max-memory") == size


@pytest.mark.parametrize("text", ["lots", "0", "-1G", "1X", "G"])
def test_bad_sizes(text):
    with pytest.raises(ConfigError, match="--max-memory must be a size such as 8G"):
        parse_size(text, "--max-memory")


def test_check_fits_names_the_estimate_and_the_limit():
    cpu = torch.device("cpu")
    check_fits(2**20, "a step", cpu, 2**30, "hint")  # fits: no error
    with pytest.raises(ConfigError) as err:
        check_fits(3 * 2**30, "a step", cpu, 2**30, "lower it")
    assert str(err.value) == (
        "a step needs about 3.0 GiB of memory, more than the limit of 1.0 GiB you set; lower it"
    )
    room, words = available_bytes(cpu)
    assert room > 0 and words.startswith("the ")
    assert gib(5 * 2**40) == "5.0 TiB" and gib(3 * 2**20) == "3.0 MiB"


@pytest.mark.skipif(not FLEX_AVAILABLE, reason="this torch has no FlexAttention")
def test_on_cuda_a_bias_runs_fused_and_keeps_no_scores():
    """No GPU needed: the shape only asks where the model will run. A learned relative bias
    (KERPLE) runs in FlexAttention on CUDA; FIRE trains with the blocked kernel there (its MLP
    score_mod has no compiled FlexAttention backward, issue 58), so its scores are counted, as
    choose_kernel decides; ``attention_kernel=blocked`` keeps the blocked kernel on CUDA too."""
    with torch.device("meta"):
        model = build_model(compose(["task=copy", "encoding=kerple_log"]), vocab_size=20)
        fire = build_model(compose(["task=copy", "encoding=fire"]), vocab_size=20)
    cpu, cuda = (ModelShape.of(model, torch.device(d)) for d in ("cpu", "cuda"))
    assert cpu.learned_bias and not cuda.learned_bias
    assert train_step_bytes(cpu, 32, 8192) > 20 * train_step_bytes(cuda, 32, 8192)
    assert ModelShape.of(fire, torch.device("cuda")).learned_bias
    assert ModelShape.of(fire, torch.device("cpu")).learned_bias
    model.attention_kernel = "blocked"  # the blocked kernel forced on CUDA too
    assert ModelShape.of(model, torch.device("cuda")).learned_bias


class DataDependentEncoding(PositionalEncoding):
    """A user's encoding whose constructor reads a tensor's value, which the meta device cannot
    give (as deberta's and xpos's did before issue 30)."""

    def __init__(self) -> None:
        super().__init__()
        self.limit = int(torch.arange(4).nonzero().max())


def test_an_encoding_the_meta_device_cannot_build_is_estimated_on_the_cpu(caplog):
    cfg = compose(
        ["task=copy", "encoding=nope", f"encoding._target_={__name__}.DataDependentEncoding"]
    )
    with caplog.at_level(logging.WARNING):
        model = model_for_estimates(cfg, vocab_size=20)
    assert isinstance(model.encoding, DataDependentEncoding) and model.encoding.limit == 3
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "DataDependentEncoding" in warning and "meta" in warning and "\n" not in warning
    check_memory(cfg, vocab_size=20)  # the preflight goes on: an estimate never stops a run


def test_a_bad_config_is_still_an_error_on_the_cpu_fallback():
    cfg = compose(["task=copy", "encoding=alibi"])
    cfg.encoding._target_ = "posx.encodings.alibi.NoSuchEncoding"
    with pytest.raises(ConfigError, match="NoSuchEncoding"):
        model_for_estimates(cfg, vocab_size=20)
