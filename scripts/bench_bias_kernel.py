"""Does the blocked bias kernel pay for the masked half of its diagonal blocks?

posx's bias kernel (``posx.kernels.bias.blocked_bias_attention``) calls the fused SDPA kernel
once per query block with that block's bias and causal mask folded into one tensor, so the
kernel computes the masked (future) half of every diagonal block too. The alternative this
script measures against it splits each block in two: the keys before the block (every one
visible: bias only) and the block's own keys (bias and mask), each through the CPU flash kernel
that also returns the log-sum-exp, merged exactly by those. The ceiling is SDPA with
``is_causal=True`` and no bias, the reference model's attention.

Paired like ``scripts/bench.py``: every round times the three back to back, in a rotating order,
and ratios are taken within a round; medians over rounds are printed.

    python scripts/bench_bias_kernel.py                  # the small model at 16x: s=1024, b=2
    python scripts/bench_bias_kernel.py --length 4096 --batch 1 --block 256
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from posx.encodings.alibi import ALiBi
from posx.kernels.bias import blocked_bias_attention
from posx.kernels.blocked import future_bias
from posx.kernels.memo import PositionMemo
from posx.model.attention import BIAS_MEMO_ELEMENTS

BiasFn = Callable[[Tensor, Tensor], Tensor]


def split_blocks(pos: Tensor, bias_fn: BiasFn, step: int) -> list[tuple[int, int, Tensor, Tensor]]:
    """Per query block ``[i0, i1)``: its own keys' bias with the causal mask, and the earlier
    keys' bias, ``[1, h, .., ..]`` each, computed once (posx's kernel keeps its blocks between
    calls too, ``PositionMemo``)."""
    blocks = []
    for i0 in range(0, len(pos), step):
        i1 = min(len(pos), i0 + step)
        own = bias_fn(pos[i0:i1], pos[i0:i1]) + future_bias(i0, i1, pos.device, i0)
        earlier = bias_fn(pos[i0:i1], pos[:i0])
        blocks.append((i0, i1, own.unsqueeze(0).contiguous(), earlier.unsqueeze(0).contiguous()))
    return blocks


def split_bias_attention(
    q: Tensor, k: Tensor, v: Tensor, blocks: list[tuple[int, int, Tensor, Tensor]]
) -> Tensor:
    """Causal attention with a bias, each query block split into its own keys (masked) and the
    earlier ones (no mask), merged by log-sum-exp. Inference on the CPU (no gradient)."""
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    outputs = []
    for i0, i1, own, earlier in blocks:
        qb = q[..., i0:i1, :]
        out, lse = flash(qb, k[..., i0:i1, :], v[..., i0:i1, :], attn_mask=own)
        if i0 > 0:
            out_e, lse_e = flash(qb, k[..., :i0, :], v[..., :i0, :], attn_mask=earlier)
            total = torch.logaddexp(lse, lse_e)
            weight, weight_e = (lse - total).exp(), (lse_e - total).exp()
            out = out * weight.unsqueeze(-1) + out_e * weight_e.unsqueeze(-1)
        outputs.append(out)
    return torch.cat(outputs, dim=-2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=32)
    parser.add_argument("--block", type=int, default=256, help="queries per block")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    if min(args.length, args.batch, args.heads, args.head_dim, args.block, args.rounds) < 1:
        print("error: every size and --rounds must be at least 1", file=sys.stderr)
        return 2
    gen = torch.Generator().manual_seed(0)
    shape = (args.batch, args.heads, args.length, args.head_dim)
    q, k, v = (torch.randn(shape, generator=gen) for _ in range(3))
    pos = torch.arange(args.length)
    alibi = ALiBi(n_heads=args.heads)
    memo = (PositionMemo(BIAS_MEMO_ELEMENTS), alibi.cache_key())
    blocks = split_blocks(pos, alibi.bias, args.block)
    variants: dict[str, Callable[[], Tensor]] = {
        "is_causal (no bias)": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "posx blocked": lambda: blocked_bias_attention(
            q, k, v, pos, pos, alibi.bias, args.block, memo
        ),
        "split + lse merge": lambda: split_bias_attention(q, k, v, blocks),
    }
    names = list(variants)
    times: dict[str, list[float]] = {name: [] for name in names}
    with torch.inference_mode():
        torch.testing.assert_close(
            variants["split + lse merge"](), variants["posx blocked"](), atol=1e-5, rtol=1e-5
        )
        for r in range(args.rounds):
            for name in names[r % 3 :] + names[: r % 3]:
                start = time.perf_counter()
                variants[name]()
                times[name].append(time.perf_counter() - start)
    ceiling = times["is_causal (no bias)"]
    print(
        f"b={args.batch} h={args.heads} s={args.length} d_h={args.head_dim} "
        f"block={args.block}, {torch.get_num_threads()} threads, median of {args.rounds} rounds"
    )
    for name in names:
        ratio = statistics.median(c / t for c, t in zip(ceiling, times[name], strict=True))
        print(
            f"  {name:22s} {statistics.median(times[name]) * 1e3:7.2f} ms   "
            f"is_causal / this = {ratio:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
