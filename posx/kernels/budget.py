"""How large one query block may be: element budgets per device, and the queries they allow.

Every blocked kernel (:mod:`posx.kernels.blocked`, :mod:`posx.kernels.bias`, CoPE's, DeBERTa's)
sizes its query blocks so that one block's ``[b, h, block, keys]`` tensors stay under a budget of
elements: memory then grows linearly with the length. On the CPU the budgets are this module's
constants, read when :func:`block_budget` is called (tests shrink them with ``monkeypatch``); on
CUDA one budget from the device's memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Largest score/bias tensor one query block may build (elements of [b, h, block, keys]):
# 2^22 float32 values = 16 MiB, whatever the length.
MAX_BLOCK_ELEMENTS = 2**22
# The explicit path below makes about ten passes over a block's logits (gathers, mask, softmax,
# value term); a 4 MiB block stays in a CPU's cache between them. Measured on the small model at
# 1,024 tokens (shaw, deberta, cope): 64 queries (this budget) ran 1.3-1.8x faster than 256.
ATTEND_BLOCK_ELEMENTS = 2**20
# The fused path's block (:func:`sdpa_query_block`): its bias is read once, by the kernel.
SDPA_BLOCK_ELEMENTS = 2**19
# On CUDA a block loop is bound by kernel launches (a few per block), not by a cache: blocks are
# as large as this share of the device's memory allows, whatever the model's block_size. The
# budget is a constant of the device, so memory stays linear in the length (a long evaluation's
# blocks all reach it; peak(32k) / peak(8k) <= 1.5 is `make bench-gpu`'s check).
CUDA_MEMORY_FRACTION = 1 / 64
# Bytes of live temporaries per element of one block's [b, h, block, keys] scores: float32
# logits and up to three tensors of the same size beside them (terms, probabilities, a mask).
CUDA_BYTES_PER_ELEMENT = 16
# Most queries per block where the budget, not ``block_size``, decides (CUDA): any length.
UNCAPPED_QUERIES = 2**31 - 1


@dataclass(frozen=True)
class BlockBudget:
    """How large one query block may be on a device: elements of ``[b, h, block, keys]``.

    Attributes:
        bias: The blocked bias kernel's bias (CPU: :data:`MAX_BLOCK_ELEMENTS`).
        attend: :func:`blocked_attend`'s logits (CPU: :data:`ATTEND_BLOCK_ELEMENTS`).
        sdpa: :func:`blocked_bias_sdpa`'s fresh bias per block (CPU: :data:`SDPA_BLOCK_ELEMENTS`).
        cope: CoPE's explicit blocks (CPU: a quarter of ``attend``, see ``cope.layer``).
        uncapped: Whether the budget alone sizes a block (CUDA): the caller's ``block_size``,
            a CPU cache setting, then does not cap it (see :meth:`queries`).
    """

    bias: int
    attend: int
    sdpa: int
    cope: int
    uncapped: bool = False

    def queries(self, block_size: int) -> int:
        """Most queries per block for a caller's ``block_size``: itself on the CPU; on CUDA
        :data:`UNCAPPED_QUERIES` (the element budget decides)."""
        return UNCAPPED_QUERIES if self.uncapped else block_size


def block_budget(device: torch.device) -> BlockBudget:
    """The query-block budgets on ``device``.

    On the CPU the module's constants (read when called), tuned for a core's cache: every CPU
    route and timing is unchanged. On CUDA, where each block costs a few kernel launches, one
    budget for every kernel: :data:`CUDA_MEMORY_FRACTION` of the device's total memory over
    :data:`CUDA_BYTES_PER_ELEMENT`, rounded down to a power of two and at least the CPU's
    (e.g. 2^26 elements, 1 GiB of temporaries, on an 80 GB H100; 2^27 on a 141 GB H200). Total
    memory, not what is free now: the same device always gets the same blocks.

    Args:
        device: Where the blocks are computed.

    Returns:
        The device's :class:`BlockBudget`.
    """
    if device.type != "cuda":
        attend = ATTEND_BLOCK_ELEMENTS
        return BlockBudget(MAX_BLOCK_ELEMENTS, attend, SDPA_BLOCK_ELEMENTS, attend // 4)
    total = torch.cuda.get_device_properties(device).total_memory
    share = int(total * CUDA_MEMORY_FRACTION) // CUDA_BYTES_PER_ELEMENT
    elements = max(MAX_BLOCK_ELEMENTS, 1 << max(0, share.bit_length() - 1))
    return BlockBudget(elements, elements, elements, elements // 4, uncapped=True)


def query_block(
    block_size: int, batch: int, heads: int, keys: int, budget: int | None = None
) -> int:
    """Queries per block: ``block_size``, or fewer so ``[b, h, block, keys]`` fits ``budget``
    elements (default :data:`MAX_BLOCK_ELEMENTS`). Callers pass the budget and the
    ``block_size`` of their device (:func:`block_budget`, :meth:`BlockBudget.queries`)."""
    budget = MAX_BLOCK_ELEMENTS if budget is None else budget
    return max(1, min(block_size, budget // max(1, batch * heads * keys)))
