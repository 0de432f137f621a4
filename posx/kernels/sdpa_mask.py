"""The float mask handed to SDPA, laid out as CUDA's memory-efficient kernel reads it.

That kernel (the one SDPA takes on CUDA when a float mask is given) loads the mask's rows in
16-byte vectors and trusts their alignment: a strided view whose row stride is not a multiple
of its vector (a diagonal read through :func:`posx.kernels.relative.relative_shift`, a block
of a per-distance table) stops it with "CUDA error: misaligned address". Transformer-XL's
evaluation on an H200 did (2026-11-26), and the error is sticky: every later CUDA call of the
process fails too. PyTorch pads a mask whose last dimension is ragged, not one whose strides
are. The CPU kernels read any layout, so there the mask is passed as it is.
"""

from __future__ import annotations

from torch import Tensor

# Elements per row the copy is padded to: 16 covers a 16-byte vector at every dtype down to one
# byte, and is what PyTorch pads a ragged last dimension to.
ROW_MULTIPLE = 16


def sdpa_mask(mask: Tensor) -> Tensor:
    """``mask`` as SDPA should receive it on its device (see the module's docstring).

    Args:
        mask: A float mask ``[b, h, sq, sk]`` (any strides; broadcast dimensions allowed).

    Returns:
        ``mask`` itself off CUDA or when already aligned, else :func:`aligned_rows` of it.
    """
    return aligned_rows(mask) if mask.device.type == "cuda" else mask


def aligned_rows(mask: Tensor, multiple: int = ROW_MULTIPLE) -> Tensor:
    """``mask``'s values with unit stride along keys and every other stride, and the first
    element's address, a multiple of ``multiple`` elements: ``mask`` itself when it already is,
    else a copy into rows padded to that multiple (the padding is never read).

    Args:
        mask: A float mask ``[..., sq, sk]``.
        multiple: Elements each row's start is aligned to.

    Returns:
        A tensor equal to ``mask`` with that layout.
    """
    aligned = (
        mask.stride(-1) == 1
        and all(stride % multiple == 0 for stride in mask.stride()[:-1])
        and mask.data_ptr() % (multiple * mask.element_size()) == 0
    )
    if aligned:
        return mask
    keys = mask.shape[-1]
    padded = -(-keys // multiple) * multiple
    out = mask.new_empty(*mask.shape[:-1], padded)[..., :keys]
    return out.copy_(mask)
