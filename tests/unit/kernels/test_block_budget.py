"""Query blocks sized per device (issue 47): the CPU's budgets unchanged, CUDA's from the
device's memory, the CUDA branch run here on a fake device, and every blocked kernel equal under
it (the blocks change, the outputs do not)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from posx.config.build import build_model
from posx.config.compose import compose
from posx.encodings import deberta
from posx.kernels import bias, blocked
from posx.kernels import budget as budgets
from posx.kernels.blocked import blocked_attend
from posx.kernels.budget import BlockBudget, block_budget, query_block

CUDA = torch.device("cuda:0")
GIB = 2**30


def fake_cuda(monkeypatch: pytest.MonkeyPatch, total_gib: float) -> None:
    """``torch.cuda.get_device_properties`` of a device with ``total_gib`` of memory."""
    props = SimpleNamespace(total_memory=int(total_gib * GIB), name="fake")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)


def use_budget(monkeypatch: pytest.MonkeyPatch, budget: BlockBudget) -> None:
    """Every kernel takes ``budget`` on any device (CPU tensors with CUDA's block sizes)."""
    for module in (budgets, blocked, bias, deberta):  # cope's layer reads it from budgets
        monkeypatch.setattr(module, "block_budget", lambda device, b=budget: b)


def test_cpu_budget_is_the_module_constants_read_when_called(monkeypatch):
    cpu = block_budget(torch.device("cpu"))
    assert cpu == BlockBudget(2**22, 2**20, 2**19, 2**18, uncapped=False)
    assert cpu.queries(256) == 256  # the model's block_size caps CPU blocks
    monkeypatch.setattr(budgets, "ATTEND_BLOCK_ELEMENTS", 64)  # tests shrink it this way
    assert block_budget(torch.device("cpu")).attend == 64
    assert block_budget(torch.device("cpu")).cope == 16


@pytest.mark.parametrize(
    ("total_gib", "elements"),
    [(79.2, 2**26), (80.0, 2**26), (139.8, 2**27), (24.0, 2**24), (0.5, 2**22)],
)
def test_cuda_budget_comes_from_the_devices_memory(monkeypatch, total_gib, elements):
    """A power of two near total / 64 / 16 bytes, at least the CPU's; uncapped by block_size."""
    fake_cuda(monkeypatch, total_gib)
    got = block_budget(CUDA)
    assert got == BlockBudget(elements, elements, elements, elements // 4, uncapped=True)
    assert elements * budgets.CUDA_BYTES_PER_ELEMENT <= total_gib * GIB / 64 or elements == 2**22
    assert got.queries(256) == budgets.UNCAPPED_QUERIES
    assert block_budget(torch.device("cpu")).attend == 2**20  # the CPU is not affected


def test_cuda_blocks_are_launch_sized_and_memory_stays_constant_per_block(monkeypatch):
    """GPT-2 small (12 heads), one sequence on an 80 GB device: a few hundred blocks per layer at
    32k (the CPU budget: 16,384 of 2 queries), every block at 8k and 32k near the same element
    count, so the blocks' memory does not grow with the length (peak(32k) / peak(8k) <= 1.5)."""
    fake_cuda(monkeypatch, 80)
    gpu, cpu = block_budget(CUDA), block_budget(torch.device("cpu"))
    sizes = {}
    for keys in (8192, 32768):
        step = query_block(gpu.queries(256), 1, 12, keys, gpu.attend)
        sizes[keys] = 12 * step * keys
        assert gpu.attend / 2 < sizes[keys] <= gpu.attend
    assert query_block(gpu.queries(256), 1, 12, 8192, gpu.attend) == 682  # > block_size 256
    assert -(-32768 // query_block(gpu.queries(256), 1, 12, 32768, gpu.attend)) == 193
    assert -(-32768 // query_block(cpu.queries(256), 1, 12, 32768, cpu.attend)) == 16384
    # training at 1k tokens, 8 sequences: two blocks per layer (the CPU: 103 blocks of 10)
    assert query_block(gpu.queries(256), 8, 12, 1024, gpu.attend) == 682
    assert query_block(cpu.queries(256), 8, 12, 1024, cpu.attend) == 10
    # transformer_xl's fused blocks: at most half the keys, the rest from the budget
    assert blocked.sdpa_query_block(256, 1, 12, 32768, CUDA) == gpu.sdpa // (12 * 32768)
    assert blocked.sdpa_query_block(256, 8, 12, 1024, CUDA) == 512


def test_blocked_attend_takes_more_queries_than_block_size_on_cuda(monkeypatch):
    """An uncapped budget of 16 queries' logits: blocks of 16 although block_size is 2."""
    b, h, s = 1, 2, 40
    small = BlockBudget(b * h * 16 * s, b * h * 16 * s, 1, 1, uncapped=True)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, h, s, 8, generator=gen) for _ in range(3))
    spans = []

    def scores(i0: int, i1: int, j0: int) -> tuple[torch.Tensor, None]:
        spans.append(i1 - i0)
        return (q[..., i0:i1, :] @ k[..., j0:i1, :].transpose(-1, -2)) * 8**-0.5, None

    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    use_budget(monkeypatch, small)
    got = blocked_attend(v, scores, block_size=2)
    assert spans == [8, 16, 16]  # last block first
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


# every kind of blocked kernel: bias (blocked), attend (shaw, deberta, cope), fused SDPA blocks
# (transformer_xl's evaluation), ReRoPE's blocked_attend
NAMES = ["alibi", "t5", "shaw", "deberta", "cope", "transformer_xl", "fire"]
DIMS = ["model.d_model=32", "model.n_heads=4", "model.n_layers=2", "train.length=16"]


@pytest.mark.parametrize("name", NAMES)
def test_the_model_under_cudas_budget_equals_the_cpu_blocks(monkeypatch, name):
    """Outputs and gradients with the CUDA budget of a fake 80 GB device (one block per layer
    here) and with a small uncapped one (blocks wider than ``block_size``, several per layer)
    equal the CPU budget's blocks of 3 queries."""
    fake_cuda(monkeypatch, 80)
    tokens = torch.arange(45).remainder(40).unsqueeze(0).repeat(2, 1)
    cfg = compose([f"encoding={name}", *DIMS, "model.attn_block_size=3"])

    def run() -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        torch.manual_seed(0)
        model = build_model(cfg, vocab_size=40)
        with torch.no_grad():
            evaluated = model.eval()(tokens)
        trained = model.train()(tokens[:, :16])
        trained.square().mean().backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        return evaluated, trained, grads

    expected = run()
    narrow = 2 * 4 * 45 * 10  # 10 queries' logits over every key
    for budget in (
        block_budget(CUDA),
        BlockBudget(narrow, narrow, narrow // 2, narrow // 4, uncapped=True),
    ):
        use_budget(monkeypatch, budget)
        got = run()
        torch.testing.assert_close(got[0], expected[0], atol=2e-5, rtol=2e-5)
        torch.testing.assert_close(got[1], expected[1], atol=2e-5, rtol=2e-5)
        for g, e in zip(got[2], expected[2], strict=True):
            torch.testing.assert_close(g, e, atol=2e-5, rtol=2e-5)


def test_rerope_under_cudas_budget(monkeypatch):
    """RoPE with ReRoPE scaling computes attention itself through blocked_attend."""
    fake_cuda(monkeypatch, 80)
    cfg = compose(["encoding=rope", *DIMS, "encoding.scaling.type=rerope"])
    tokens = torch.arange(45).remainder(40).unsqueeze(0)
    torch.manual_seed(0)
    model = build_model(cfg, vocab_size=40).eval()
    with torch.no_grad():
        expected = model(tokens)
        use_budget(monkeypatch, dataclasses.replace(block_budget(CUDA)))
        got = model(tokens)
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=2e-5)
