"""The encoding contract, checked for every ``configs/encoding/*.yaml`` (a new yaml is picked up
automatically): it builds, is causal, extrapolates or says why not, treats positions
``None``, ``[s]`` and ``[b, s]`` alike, and trains under bf16 autocast (with every RoPE scaling
type) as it does in float32."""

from __future__ import annotations

import pytest
import torch

from posx.config.compose import CONFIG_DIR
from posx.encodings.base import PositionalEncoding
from posx.encodings.rope_scaling import SCALING_TYPES

ENCODINGS = sorted(p.stem for p in (CONFIG_DIR / "encoding").glob("*.yaml"))
TRAIN_LEN = 16
BATCH = 2


def uses_positions(encoding: PositionalEncoding) -> bool:
    """Whether the encoding overrides any hook of the contract (NoPE overrides none)."""
    hooks = ("embed", "rotate", "bias", "attend")
    return any(getattr(type(encoding), h) is not getattr(PositionalEncoding, h) for h in hooks)


def test_encoding_configs_are_discovered():
    assert {"nope", "rope", "alibi", "t5", "sinusoidal", "learned"} <= set(ENCODINGS)


@pytest.fixture(scope="module", params=ENCODINGS)
def encoding_name(request):
    return request.param


@pytest.fixture(scope="module")
def model(encoding_name, make_tiny_model):
    torch.manual_seed(0)
    return make_tiny_model(encoding_name)


@pytest.fixture
def tokens(model):
    gen = torch.Generator().manual_seed(1)
    return torch.randint(model.head.out_features, (BATCH, TRAIN_LEN), generator=gen)


def test_builds_a_positional_encoding(model):
    assert isinstance(model.encoding, PositionalEncoding)
    for i in range(len(model.blocks)):
        assert isinstance(model.encoding.for_layer(i), PositionalEncoding)


@torch.no_grad()
@pytest.mark.parametrize("j", [1, 7, TRAIN_LEN - 1])
def test_causal(model, tokens, j):
    base = model(tokens)
    changed = tokens.clone()
    changed[:, j] = (changed[:, j] + 1) % model.head.out_features
    out = model(changed)
    torch.testing.assert_close(out[:, :j], base[:, :j], atol=1e-5, rtol=0)
    # The change must be visible from position j on, or the check above proves nothing.
    assert not torch.allclose(out[:, j:], base[:, j:], atol=1e-5)


@torch.no_grad()
def test_runs_at_4x_training_length_or_says_why_not(model, tokens):
    long = 4 * TRAIN_LEN
    reason = model.encoding.unsupported_reason(long)
    if reason is None:
        gen = torch.Generator().manual_seed(2)
        out = model(torch.randint(model.head.out_features, (BATCH, long), generator=gen))
        assert out.shape == (BATCH, long, model.head.out_features)
        assert torch.isfinite(out).all()
    else:
        assert isinstance(reason, str) and reason.strip()
        assert model.encoding.unsupported_reason(TRAIN_LEN) is None
        out = model(tokens)
        assert out.shape == (BATCH, TRAIN_LEN, model.head.out_features)
        assert torch.isfinite(out).all()


@torch.no_grad()
def test_explicit_positions_match_default(model, tokens):
    default = model(tokens)
    pos = torch.arange(TRAIN_LEN)
    shared = model(tokens, pos)
    per_row = model(tokens, pos.expand(BATCH, TRAIN_LEN))
    torch.testing.assert_close(shared, default, atol=1e-5, rtol=0)
    torch.testing.assert_close(per_row, default, atol=1e-5, rtol=0)


@torch.no_grad()
def test_per_row_positions_apply_to_their_own_row(model):
    """Randomized positions (sorted, from [0, train length)) differ per row; each row's output
    equals running that row alone with its own ``[s]`` positions."""
    gen = torch.Generator().manual_seed(3)
    s = TRAIN_LEN // 2
    tokens = torch.randint(model.head.out_features, (BATCH, s), generator=gen)
    pos = torch.stack(
        [torch.randperm(TRAIN_LEN, generator=gen)[:s].sort().values for _ in range(BATCH)]
    )
    assert not torch.equal(pos[0], pos[1])
    out = model(tokens, pos)
    for r in range(BATCH):
        alone = model(tokens[r : r + 1], pos[r])
        torch.testing.assert_close(out[r : r + 1], alone, atol=1e-5, rtol=0)
    if uses_positions(model.encoding):
        # Uneven gaps change every encoding that reads positions, relative ones included.
        assert not torch.allclose(out, model(tokens), atol=1e-5)


@torch.no_grad()
def test_attention_block_size_does_not_change_outputs(
    model, tokens, encoding_name, make_tiny_model
):
    """The model's blocked attention path gives the same logits for any query block size."""
    small = make_tiny_model(encoding_name, "model.attn_block_size=3").eval()
    small.load_state_dict(model.state_dict())
    torch.testing.assert_close(small(tokens), model(tokens), atol=1e-5, rtol=0)


# --- bf16 autocast: the GPU training path, run on the CPU ---------------------------------

#: Every encoding yaml, plus RoPE under every scaling type (``none`` is ``rope.yaml`` itself).
# LongRoPE takes its per-dimension factors (d_h = 16: 8 of them) with its type
LONGROPE = ("+encoding.scaling.factors=[1.0,1.2,1.5,2.0,2.5,3.0,3.5,4.0]",)
PRECISION_CASES = [(name, ()) for name in ENCODINGS] + [
    (
        "rope",
        (f"encoding.scaling.type={kind}", "encoding.scaling.factor=4")
        + (() if kind == "none" else ("encoding.scaling.original_length=16",))
        + (LONGROPE if kind == "longrope" else ()),
    )
    for kind in SCALING_TYPES
]
# Realistic layout (b > 1, h > 1, s >= 64, d_h >= 16) at the smallest cost: one layer.
PRECISION_DIMS = [
    "model.d_model=32",
    "model.n_heads=2",
    "model.n_layers=1",
    "model.d_ff=64",
    "train.length=256",
]
PRECISION_LEN = 64
#: bf16 vs float32 relative error of the logits, measured: ~0.007 for most encodings, 0.016
#: DynamicBias, 0.021 CoPE (its gates sum bf16 q.k). Shuffling the positions (what a layout bug
#: does) moves them by 0.07 (FIRE) to 1.3; the RoPE bug of issue 17 raised.
BF16_TOLERANCE = 0.03


def _case_id(case: tuple[str, tuple[str, ...]]) -> str:
    name, extra = case
    return name if not extra else f"{name}-{extra[0].rsplit('=', 1)[1]}"


def sharpened(model: torch.nn.Module) -> torch.nn.Module:
    """Weights that make attention sharp and the encoding matter: at the default init (std
    0.02, learned tables near zero) attention is nearly uniform and hides any position error."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("encoding."):
                p.normal_(std=0.5, generator=gen)
            elif p.dim() == 2:
                p.normal_(std=p.shape[1] ** -0.5, generator=gen)
    return model


def logits_and_grads(
    model: torch.nn.Module, tokens: torch.Tensor, pos: torch.Tensor, bf16: bool
) -> tuple[torch.Tensor, dict[str, torch.Tensor | None]]:
    """float32 logits ``[b, s, vocab]`` and every parameter's gradient of the LM loss."""
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(tokens, pos)
    target = tokens.roll(-1, dims=1)
    loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), target.flatten())
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    return logits.float().detach(), grads


@pytest.mark.parametrize("case", PRECISION_CASES, ids=_case_id)
def test_bf16_autocast_forward_backward_matches_float32(case, make_tiny_model):
    """Forward + backward under ``torch.autocast(bfloat16)`` (what CUDA training runs) agree with
    float32, at per-row positions with uneven gaps so a misplaced batch, head or sequence axis
    shows."""
    name, extra = case
    torch.manual_seed(0)
    model = sharpened(make_tiny_model(name, *PRECISION_DIMS, *extra))
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(model.head.out_features, (BATCH, PRECISION_LEN), generator=gen)
    pos = torch.stack(
        [torch.arange(PRECISION_LEN), torch.randperm(256, generator=gen)[:PRECISION_LEN].sort()[0]]
    )
    ref, ref_grads = logits_and_grads(model, tokens, pos, bf16=False)
    got, grads = logits_and_grads(model, tokens, pos, bf16=True)

    assert got.shape == ref.shape
    err = float((got - ref).norm() / ref.norm())
    assert err < BF16_TOLERANCE, f"bf16 logits differ from float32 by {err:.3g} (relative)"
    if uses_positions(model.encoding):
        # The tolerance is far below what positions on the wrong tokens do to the logits.
        shuffled = torch.stack([row[torch.randperm(PRECISION_LEN, generator=gen)] for row in pos])
        moved_logits, _ = logits_and_grads(model, tokens, shuffled, bf16=False)
        moved = float((moved_logits - ref).norm() / ref.norm())
        assert moved > BF16_TOLERANCE and moved > 4 * err, (moved, err)

    missing = [n for n, g in grads.items() if g is None]
    assert not missing, f"no gradient under bf16 autocast for {missing}"
    assert all(torch.isfinite(g).all() for g in grads.values())
    flat = torch.cat([g.flatten() for g in grads.values()])
    flat_ref = torch.cat([g.flatten() for g in ref_grads.values()])
    cos = float(torch.nn.functional.cosine_similarity(flat, flat_ref, dim=0))

    assert cos > 0.9, f"bf16 gradient direction differs from float32 (cosine {cos:.3f})"
