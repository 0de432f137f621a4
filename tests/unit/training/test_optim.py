"""Optimizer groups per encoding declaration, the learning-rate schedule and the training loss,
each against values computed here independently of the code under test."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from posx.config.compose import CONFIG_DIR
from posx.encodings.base import PositionalEncoding
from posx.errors import PosxError
from posx.tasks.base import Batch
from posx.training.losses import masked_loss
from posx.training.optim import grad_norm, lr_at, make_optimizer, parameter_groups

ENCODINGS = sorted(p.stem for p in (CONFIG_DIR / "encoding").glob("*.yaml"))
CPU = torch.device("cpu")

# The encoding parameters (below `encoding.`) that take weight decay in the 2-layer tiny model,
# as docs/encodings.md decides per paper. Every yaml needs a row: a new encoding must decide.
DECAYED = {
    "nope": set(),
    "rope": set(),
    "xpos": set(),
    "alibi": set(),
    "sandwich": set(),
    "sinusoidal": set(),
    "alibi_learned": set(),  # log-slopes: decay would pull every slope toward 1
    "kerple_log": set(),  # r1, r2: the paper trains with weight decay 0
    "kerple_power": set(),
    "fire": {"w1", "w2"},  # MLP weights; not its biases, c or threshold
    "dynamic_bias": set(),  # Swin V2 exempts the position-bias MLP
    "t5": {"table.weight"},
    "learned": {"table.weight"},
    "abacus": {"table.weight"},  # an embedding table, like learned's
    "shaw": {f"layers.{i}.{w}" for i in range(2) for w in ("w_k", "w_v")},
    "cope": {f"layers.{i}.pos_emb" for i in range(2)},
    "transformer_xl": {f"layers.{i}.w_r" for i in range(2)},  # not the biases u, v
    "deberta": {"rel_embeddings.weight"}
    | {f"layers.{i}.{p}_proj.weight" for i in range(2) for p in ("key", "query")},
    "complex_order": {"amplitude.weight", "phase.weight", "frequency.weight"},
    "floater": {"net.0.weight", "net.2.weight"},  # not p0 or the biases
}
# The model's own parameters: matrices and the (tied) token embedding decayed, norms not.
MODEL_DECAYED = {"tok.weight"} | {
    f"blocks.{i}.{m}.weight" for i in range(2) for m in ("attn.qkv", "attn.proj", "fc", "out")
}


def train_cfg(**kw):
    train = {"lr": 1e-3, "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.95, "warmup_steps": 4,
             "steps": 12, "min_lr_ratio": 0.1, **kw}  # fmt: skip
    return OmegaConf.create({"train": train})


def test_every_encoding_yaml_has_a_decided_row():
    assert set(DECAYED) == set(ENCODINGS)


@pytest.mark.parametrize("name", ENCODINGS)
def test_optimizer_groups_follow_each_encodings_declaration(name, make_tiny_model):
    model = make_tiny_model(name)
    opt = make_optimizer(model, train_cfg(), CPU)
    names = {id(p): n for n, p in model.named_parameters()}
    decay, rest = opt.param_groups
    assert (decay["weight_decay"], rest["weight_decay"]) == (0.1, 0.0)
    decayed = {names[id(p)] for p in decay["params"]}
    kept = {names[id(p)] for p in rest["params"]}
    assert decayed | kept == set(names.values()) and not decayed & kept
    encoding = {n.removeprefix("encoding.") for n in decayed if n.startswith("encoding.")}
    assert encoding == DECAYED[name]
    assert decayed - {f"encoding.{n}" for n in encoding} == MODEL_DECAYED
    order = list(names.values()).index
    want = {"decay": sorted(decayed, key=order), "no_decay": sorted(kept, key=order)}
    assert parameter_groups(model) == want


def test_one_adamw_step_decays_only_the_declared_parameters(make_tiny_model):
    # With zero gradients AdamW's update is the decay alone: p <- p (1 - lr wd).
    model = make_tiny_model("fire")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = make_optimizer(model, train_cfg(lr=0.5, weight_decay=0.2), CPU)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    for n, p in model.named_parameters():
        scale = 1 - 0.5 * 0.2 if n in MODEL_DECAYED or n in {"encoding.w1", "encoding.w2"} else 1
        torch.testing.assert_close(p.detach(), before[n] * scale, rtol=0, atol=1e-7, msg=n)
    assert opt.defaults["lr"] == 0.5 and opt.defaults["betas"] == (0.9, 0.95)


class Frozen(PositionalEncoding):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(2, 3))  # a bare parameter: not decayed by default
        self.proj = nn.Linear(3, 3)
        self.proj.weight.requires_grad_(False)


def test_frozen_parameters_are_left_out_and_bare_ones_not_decayed():
    model = nn.ModuleDict({"encoding": Frozen(), "head": nn.Linear(3, 2)})
    assert parameter_groups(model) == {
        "decay": ["head.weight"],
        "no_decay": ["encoding.scale", "encoding.proj.bias", "head.bias"],
    }


class Misdeclared(Frozen):
    def decayed_parameter_names(self) -> set[str]:
        return {"scael"}


def test_a_declared_name_that_is_no_parameter_is_an_error():
    with pytest.raises(PosxError, match="'encoding.scael', which is no parameter"):
        make_optimizer(nn.ModuleDict({"encoding": Misdeclared()}), train_cfg(), CPU)


# --- learning-rate schedule ----------------------------------------------------------------


def schedule(lr, warmup, steps, floor_ratio):
    """Warmup then cosine, written out with numpy for every step 0..steps."""
    out = []
    for s in range(steps + 1):
        if s < warmup:
            out.append(lr * (s + 1) / warmup)
            continue
        frac = min(1.0, (s - warmup) / max(1, steps - warmup))
        floor = lr * floor_ratio
        out.append(floor + (lr - floor) * (np.cos(np.pi * frac) + 1) / 2)
    return np.array(out)


@pytest.mark.parametrize(("warmup", "steps"), [(4, 12), (0, 10), (10, 10), (1, 2)])
def test_lr_schedule_matches_an_independent_computation(warmup, steps):
    cfg = train_cfg(lr=3e-3, warmup_steps=warmup, steps=steps, min_lr_ratio=0.1)
    got = np.array([lr_at(s, cfg) for s in range(steps + 1)])
    np.testing.assert_allclose(got, schedule(3e-3, warmup, steps, 0.1), rtol=1e-12)


def test_lr_schedule_by_hand():
    cfg = train_cfg(lr=1.0, warmup_steps=4, steps=12, min_lr_ratio=0.1)
    assert [lr_at(s, cfg) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_at(4, cfg) == 1.0  # cosine starts at the peak
    assert lr_at(8, cfg) == pytest.approx(0.55)  # halfway: floor + (peak - floor) / 2
    assert lr_at(12, cfg) == pytest.approx(0.1) and lr_at(50, cfg) == pytest.approx(0.1)


# --- masked loss ---------------------------------------------------------------------------


def test_masked_loss_is_the_mean_negative_log_likelihood_of_scored_targets():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 7, generator=gen)
    targets = torch.randint(7, (2, 5), generator=gen)
    mask = torch.tensor([[0, 1, 1, 0, 1], [1, 0, 0, 0, 1]], dtype=torch.bool)
    batch = Batch(targets, targets, mask)
    nll = []
    for b in range(2):
        for s in range(5):
            if mask[b, s]:
                row = logits[b, s].double()
                log_z = math.log(sum(math.exp(x) for x in row.tolist()))
                nll.append(log_z - row[targets[b, s]].item())
    assert masked_loss(logits, batch).item() == pytest.approx(sum(nll) / len(nll), rel=1e-6)
    # Unscored positions do not matter, whatever their logits.
    noisy = logits.masked_fill(~mask.unsqueeze(-1), 1e4)
    assert masked_loss(noisy, batch).item() == pytest.approx(sum(nll) / len(nll), rel=1e-6)


def test_masked_loss_is_float32_for_bfloat16_logits():
    logits = torch.zeros(1, 3, 4, dtype=torch.bfloat16)
    batch = Batch(torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 3, dtype=torch.long),
                  torch.ones(1, 3, dtype=torch.bool))  # fmt: skip
    loss = masked_loss(logits, batch)
    assert loss.dtype == torch.float32 and loss.item() == pytest.approx(math.log(4))


def test_masked_loss_without_scored_targets_is_nan():
    batch = Batch(torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, 2, dtype=torch.long),
                  torch.zeros(1, 2, dtype=torch.bool))  # fmt: skip
    assert math.isnan(masked_loss(torch.zeros(1, 2, 3), batch).item())


def test_grad_norm_measures_without_touching_and_clips_when_asked():
    model = torch.nn.Linear(4, 3)
    model(torch.ones(2, 4)).pow(2).sum().mul(100).backward()
    before = [p.grad.clone() for p in model.parameters()]
    expected = torch.linalg.vector_norm(torch.cat([g.flatten() for g in before]))
    assert torch.allclose(grad_norm(model), expected)
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), before, strict=True))
    assert torch.allclose(grad_norm(model, clip=1.0), expected)  # the norm before clipping
    clipped = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert clipped == pytest.approx(1.0, rel=1e-4)
