"""Per-layer parameters, for every ``configs/encoding/*.yaml`` (and both settings of a yaml's
``per_layer``): layer ``i`` computes from layer ``i``'s parameters only, and an encoding whose
layers differ refuses to compute a hook without being told the layer.

Which parameters a layer uses is measured, not taken from the encoding: the elements with a
non-zero gradient of that layer's attention output."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import Tensor

from posx.config.compose import CONFIG_DIR
from posx.encodings.alibi_learned import ALiBiLearned
from posx.encodings.kerple import KerpleLog
from posx.encodings.per_layer import LayerView, PerLayer
from posx.model.attention import causal_attention

N_LAYERS = 2  # the tiny model's
HEADS, HEAD_DIM, S = 4, 8, 6


def _cases() -> list[tuple[str, ...]]:
    cases: list[tuple[str, ...]] = []
    for path in sorted((CONFIG_DIR / "encoding").glob("*.yaml")):
        if "\nper_layer:" in path.read_text():  # the yaml's choice: test both settings
            cases += [(path.stem, f"encoding.per_layer={flag}") for flag in ("true", "false")]
        else:
            cases.append((path.stem,))
    return [*cases, ("transformer_xl", "encoding.share_uv=false")]


CASES = _cases()


def _inputs() -> tuple[Tensor, Tensor, Tensor, Tensor]:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, HEADS, S, HEAD_DIM, generator=gen) for _ in range(3))
    return q, k, v, torch.tensor([0, 1, 3, 4, 7, 9])  # uneven gaps


def _layer_output(model, layer: int) -> Tensor:
    q, k, v, pos = _inputs()
    return causal_attention(q, k, v, pos, pos, model.encoding.for_layer(layer), block_size=4)


def _used_by(model, layer: int) -> dict[str, Tensor]:
    """For each encoding parameter, the elements layer ``layer``'s output depends on."""
    named = list(model.encoding.named_parameters())
    out = _layer_output(model, layer)
    if not out.requires_grad:  # no parameters at attention time (embeddings only, or none)
        return {n: torch.zeros_like(p, dtype=torch.bool) for n, p in named}
    names, params = zip(*named, strict=True)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    grads = torch.autograd.grad((out * weights).sum(), params, allow_unused=True)
    return {
        n: torch.zeros_like(p, dtype=torch.bool) if g is None else g != 0
        for n, p, g in zip(names, params, grads, strict=True)
    }


@pytest.fixture(scope="module", params=CASES, ids=[" ".join(c) for c in CASES])
def model(request, make_tiny_model):
    torch.manual_seed(0)
    name, *extra = request.param
    return make_tiny_model(name, *extra)


def test_cases_cover_both_kinds():
    assert ("kerple_log", "encoding.per_layer=false") in CASES and ("deberta",) in CASES


def test_each_layer_uses_its_own_parameters(model):
    """Perturbing the elements only layer 1 uses changes layer 1's output and leaves layer 0's
    bit for bit (and the other way round); those elements are set 1 of a stacked tensor or
    ``layers.1``. An encoding whose layers share every parameter skips the perturbation."""
    used = [_used_by(model, i) for i in range(N_LAYERS)]
    params = dict(model.encoding.named_parameters())
    for mine, other in ((1, 0), (0, 1)):
        only = {n: used[mine][n] & ~used[other][n] for n in params}
        if not any(m.any() for m in only.values()):
            continue  # nothing of its own: the layers share their parameters
        for name, mask in only.items():
            if not mask.any():
                continue
            if name.startswith("layers."):
                assert name.startswith(f"layers.{mine}."), name
            else:
                assert mask.shape[0] == N_LAYERS and not mask[other].any(), name
        with torch.no_grad():
            before = [_layer_output(model, i) for i in range(N_LAYERS)]
            saved = {n: p.clone() for n, p in params.items()}
            gen = torch.Generator().manual_seed(2)
            for name, p in params.items():
                p.add_(torch.randn(p.shape, generator=gen) * only[name])
            after = [_layer_output(model, i) for i in range(N_LAYERS)]
            for name, p in params.items():
                p.copy_(saved[name])
        assert torch.equal(after[other], before[other])
        assert not torch.allclose(after[mine], before[mine], atol=1e-4)


def test_hooks_need_a_layer_exactly_when_layers_differ(model):
    """Layers with parameters of their own: the encoding itself refuses ``bias``, ``attend``
    and ``rotate``. One set for all layers: the encoding serves every layer itself."""
    enc = model.encoding
    used = [_used_by(model, i) for i in range(N_LAYERS)]
    per_layer = any(not torch.equal(used[0][n], used[1][n]) for n in used[0])
    q, k, v, pos = _inputs()
    if per_layer:
        for call in (
            lambda: enc.bias(pos, pos),
            lambda: enc.attend(q, k, v, pos, pos),
            lambda: enc.rotate(q, k, pos, pos),
        ):
            with pytest.raises(RuntimeError, match=r"per-layer parameters.*for_layer\(i\)"):
                call()
        assert enc.for_layer(0) is not enc.for_layer(1)
    else:
        with torch.no_grad():
            got = causal_attention(q, k, v, pos, pos, enc, block_size=4)
            for i in range(N_LAYERS):
                torch.testing.assert_close(_layer_output(model, i), got, atol=0, rtol=0)


def test_layer_views_own_nothing_and_stay_the_same(model):
    enc = model.encoding
    for i in range(N_LAYERS):
        layer = enc.for_layer(i)
        assert layer is enc.for_layer(i)  # attention caches per layer encoding by identity
        if layer is not enc:
            assert isinstance(layer, LayerView)
            assert not list(layer.parameters()) and not list(layer.children())
            assert layer.has_bias == enc.has_bias and layer.has_attend == enc.has_attend
            assert layer.has_score_mod == enc.has_score_mod
            assert layer.has_flex_scores == enc.has_flex_scores
    # Every parameter is registered once (the LM head's weight is the token embedding's).
    registered = len(list(model.named_parameters(remove_duplicate=False)))
    assert registered == len(list(model.parameters())) + (model.head.weight is model.tok.weight)


# --- the mechanism on one encoding ---------------------------------------------------------


def test_one_layer_or_one_shared_set_serves_itself():
    pos = torch.arange(5)
    for enc in (KerpleLog(4, n_layers=1), KerpleLog(4, n_layers=3, per_layer=False)):
        assert enc.for_layer(0) is enc and enc.n_sets == 1
        torch.testing.assert_close(enc.bias(pos, pos), enc.for_layer(0).bias(pos, pos))
        assert enc.r1().shape == (4,)


def test_parameter_accessors_need_a_layer_too():
    enc = KerpleLog(4, n_layers=2)
    with pytest.raises(RuntimeError, match=r"for_layer\(i\).r1"):
        enc.r1()
    assert torch.equal(enc.r1(1), enc.r1(1)) and not torch.equal(enc.r1(0), enc.r1(1))
    with pytest.raises(IndexError, match="sets 0..1"):
        enc.r1(2)
    with pytest.raises(IndexError, match="layers 0..1"):
        enc.for_layer(2)
    with pytest.raises(IndexError, match="layers 0..2"):
        KerpleLog(4, n_layers=3, per_layer=False).for_layer(3)


def test_a_copy_computes_from_its_own_parameters():
    enc = ALiBiLearned(4, n_layers=2, per_layer=True)
    view = enc.for_layer(1)
    twin = copy.deepcopy(enc)
    with torch.no_grad():
        twin.log_slopes[1] += 1.0
    pos = torch.arange(5)
    torch.testing.assert_close(twin.for_layer(1).bias(pos, pos), view.bias(pos, pos) * torch.e)
    assert twin.for_layer(1) is not view


class _ScaledKeys(PerLayer):
    """A per-layer rotation for the test: keys scaled by a learned factor per layer."""

    def __init__(self, n_layers: int) -> None:
        super().__init__(n_layers, per_layer=True)
        self.scale = torch.nn.Parameter(torch.arange(1.0, n_layers + 1))

    def layer_rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, layer: int):
        return q, k * self.scale[layer]


def test_rotate_is_forwarded_with_the_layer():
    enc = _ScaledKeys(3)
    q, k = torch.ones(1, 1, 2, 4), torch.ones(1, 1, 2, 4)
    pos = torch.arange(2)
    assert not enc.has_bias and not enc.has_attend
    assert torch.equal(enc.for_layer(2).rotate(q, k, pos, pos)[1], k * 3)
    with pytest.raises(RuntimeError, match="_ScaledKeys has per-layer parameters"):
        enc.rotate(q, k, pos, pos)
