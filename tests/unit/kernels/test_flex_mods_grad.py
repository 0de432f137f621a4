"""FIRE's training score_mod reads each captured tensor that takes a gradient at most once:
FlexAttention's CUDA backward refuses one indexed twice (torch 2.11 on an H200, issue 58:
"Using multiple indexing operations on the same tensor that requires gradients"). The CPU has no
FlexAttention backward, so the rule is checked on the score_mod itself."""

from __future__ import annotations

from collections import Counter

import torch
from torch.overrides import TorchFunctionMode

from posx.config.build import build_encoding
from posx.config.compose import compose


class IndexingOfGradTensors(TorchFunctionMode):
    """Counts ``tensor[...]`` on tensors that require a gradient, per tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[int] = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.__getitem__ and args[0].requires_grad:
            self.counts[id(args[0])] += 1
        return func(*args, **(kwargs or {}))


def test_fire_training_score_mod_indexes_each_grad_tensor_once():
    enc = build_encoding(compose(["encoding=fire", "model.n_heads=4", "train.length=64"]))
    layer = enc.for_layer(0)
    pos = torch.arange(16)
    mod = layer.score_mod(pos, pos)  # grad enabled: the unrolled MLP of training
    idx = [torch.tensor(i) for i in (0, 2, 9, 4)]  # score's stand-in, b, h, q_idx, kv_idx below
    with IndexingOfGradTensors() as seen:
        out = mod(torch.tensor(0.5), torch.tensor(0), torch.tensor(2), idx[2], idx[3])
    assert out.requires_grad  # the parameters' gradient flows
    assert seen.counts and max(seen.counts.values()) == 1, seen.counts
