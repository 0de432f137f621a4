"""Every tensor the model makes while running lands on its inputs' device, not a default one.

Without a second device on this machine, the default device stands in for "the wrong one":
inside ``with torch.device("meta")`` a factory call that names no device (``torch.arange(n)``)
makes a meta tensor, and mixing it with the CPU inputs raises or leaves a meta output. On a GPU
the same call would make a CPU tensor next to CUDA ones. Caches (RoPE's cos/sin table,
Sandwich's profile, the position memo) must also be rebuilt, not reused, for another device.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from posx.config.compose import CONFIG_DIR
from posx.encodings.rope import RoPE
from posx.encodings.rope_scaling import SCALING_TYPES
from posx.encodings.sandwich import Sandwich
from posx.encodings.t5 import T5Bias
from posx.kernels.flex.attention import FLEX_AVAILABLE, distance_table, flex_bias_attention
from posx.kernels.memo import PositionMemo

CASES = [(n.stem, ()) for n in sorted((CONFIG_DIR / "encoding").glob("*.yaml"))] + [
    ("rope", (f"encoding.scaling.type={kind}", "encoding.scaling.factor=4"))
    for kind in SCALING_TYPES
    if kind != "none"
]
DIMS = ["model.d_model=32", "model.n_heads=2", "model.d_ff=64", "train.length=128"]
S = 24
POSITIONS = {
    "default": None,
    "per_row": torch.stack([torch.arange(S), torch.arange(S) * 3 + 5]),
    "float": torch.arange(S) * 0.5,
}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0] + "".join(f"-{x[-9:]}" for x in c[1]))
def test_forward_and_backward_make_nothing_on_the_default_device(case, make_tiny_model):
    name, extra = case
    torch.manual_seed(0)
    model = make_tiny_model(name, *DIMS, *extra)
    tokens = torch.randint(model.head.out_features, (2, S))
    for kind, pos in POSITIONS.items():
        model.train()
        try:
            with torch.device("meta"):  # first: no cache built outside it may hide a factory
                logits = model(tokens, pos)
        except ValueError:  # positions the encoding refuses (learned tables: fractions)
            with pytest.raises(ValueError):
                model(tokens, pos)
            continue
        with torch.device("meta"):
            logits.sum().backward()
        assert logits.device.type == "cpu" and torch.isfinite(logits).all(), kind
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        assert grads and all(g.device.type == "cpu" for g in grads), kind
        model.eval()
        with torch.device("meta"), torch.no_grad():
            logits = model(tokens, pos)
        assert logits.device.type == "cpu" and torch.isfinite(logits).all(), kind


@pytest.mark.parametrize("scaling", [None, {"type": "dynamic_ntk", "factor": 4.0}])
def test_rope_table_is_rebuilt_on_the_positions_device(scaling):
    enc = RoPE(16, scaling=scaling, train_length=8)
    q = torch.randn(2, 2, 12, 16)
    pos = torch.arange(12)
    expected = enc.rotate(q, q, pos, pos)[0]
    # A table left on another device (meta stands in for it) is not indexed with CPU positions.
    enc._cos, enc._sin = enc._cos.to("meta"), enc._sin.to("meta")
    enc._memo.clear()
    got = enc.rotate(q, q, pos, pos)[0]
    assert enc._cos.device.type == "cpu" and enc._cos.dtype == torch.float32
    torch.testing.assert_close(got, expected)


def test_sandwich_profile_is_rebuilt_on_the_positions_device():
    enc = Sandwich(2, 16)
    pos = torch.arange(10)
    expected = enc.bias(pos, pos)
    enc._profile = enc._profile.to("meta")
    got = enc.bias(pos, pos)
    assert enc._profile.device.type == "cpu"
    torch.testing.assert_close(got, expected)


def test_position_memo_keeps_devices_apart():
    memo, calls = PositionMemo(), []

    def compute(device: str) -> torch.Tensor:
        calls.append(device)
        return torch.zeros(3, device=device)

    memo.get("k", (torch.arange(3),), lambda: compute("cpu"))
    got = memo.get("k", (torch.arange(3, device="meta"),), lambda: compute("meta"))
    assert calls == ["cpu", "meta"] and got.device.type == "meta"


@pytest.mark.skipif(not FLEX_AVAILABLE, reason="torch without FlexAttention")
def test_flex_attention_makes_its_table_and_mask_on_the_inputs_device():
    enc = T5Bias(4)
    q = torch.randn(2, 4, 16, 8)
    pos = torch.stack([torch.arange(16), torch.arange(16) + 9])
    with torch.device("meta"), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the unfused reference warns that it is unfused
        table, lowest = distance_table(pos, pos, enc.bias)
        out = flex_bias_attention(q, q, q, pos, pos, enc.bias, compile=False)
    assert table.device.type == lowest.device.type == out.device.type == "cpu"
    assert torch.isfinite(out).all()
