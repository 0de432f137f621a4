"""The model's own rules (heads divide the width, known attention kernels): each lives in one
function that the model and the config's validation both call."""

from __future__ import annotations

import pytest
import torch

from posx.encodings.alibi import ALiBi
from posx.encodings.base import NoPE
from posx.model.attention import KERNELS, check_kernel, choose_kernel
from posx.model.transformer import TransformerLM, head_dim


def test_head_dim_is_the_width_of_one_head():
    assert head_dim(64, 4) == 16
    assert head_dim(30, 1) == 30


def test_head_dim_names_both_sizes_with_the_prefix_asked_for():
    with pytest.raises(ValueError, match=r"^d_model \(30\) must be divisible by n_heads \(4\)$"):
        head_dim(30, 4)
    with pytest.raises(
        ValueError, match=r"^model\.d_model \(30\) must be divisible by model\.n_heads \(4\)$"
    ):
        head_dim(30, 4, prefix="model.")


def test_a_model_built_directly_refuses_heads_that_do_not_divide_the_width():
    with pytest.raises(ValueError, match=r"^d_model \(30\) must be divisible by n_heads \(4\)$"):
        TransformerLM(vocab_size=10, encoding=NoPE(), d_model=30, n_heads=4)


@pytest.mark.parametrize("kernel", KERNELS)
def test_check_kernel_passes_every_known_kernel(kernel):
    assert check_kernel(kernel) == kernel


def test_check_kernel_lists_the_kernels():
    with pytest.raises(
        ValueError, match=r"^attention_kernel must be one of auto, blocked, flex, got 'x'$"
    ):
        check_kernel("x")
    with pytest.raises(ValueError, match=r"^model\.attention_kernel must be one of"):
        check_kernel("x", prefix="model.")


def test_a_model_built_directly_refuses_an_unknown_kernel():
    with pytest.raises(ValueError, match=r"^attention_kernel must be one of auto, blocked, flex"):
        TransformerLM(vocab_size=10, encoding=NoPE(), attention_kernel="fused")
    model = TransformerLM(vocab_size=10, encoding=NoPE(), attention_kernel="blocked")
    with pytest.raises(ValueError, match="got 'fast'"):
        model.attention_kernel = "fast"
    assert model.attention_kernel == "blocked"  # unchanged by the refused value


def test_choose_kernel_refuses_an_unknown_kernel_with_the_same_message():
    with pytest.raises(ValueError, match=r"^attention_kernel must be one of auto, blocked, flex"):
        choose_kernel(ALiBi(4), torch.device("cpu"), "fused")
