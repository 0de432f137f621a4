"""Rotary position embedding (Su et al. 2021, RoFormer), with inference-time scaling.

Pairs of query/key dimensions are rotated by ``pos * base^(-2i/r)`` so that the score
``q_m . k_n`` depends only on ``m - n``. Dimensions are paired as in the paper (and GPT-J):
adjacent ``(x_{2i}, x_{2i+1})``, so a pair is one complex number and the rotation one complex
multiply (the GPT-NeoX half-and-half pairing is the same up to a fixed permutation of the learned
projections, and costs a copy per call). With ``rotary_fraction < 1`` only the first ``r``
dimensions of each head rotate (partial rotary); the rest pass through.

``scaling`` (see :mod:`posx.encodings.rope_scaling`) swaps in other frequencies at evaluation
(``linear``, ``ntk``, ``dynamic_ntk``, ``yarn``, ``llama3``) or, for ``rerope``, computes the
scores itself so that relative positions beyond a window all read as the window; for
``selfextend`` it scores keys beyond a neighbour window at grouped positions
(:mod:`posx.kernels.self_extend`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from posx.encodings.base import PositionalEncoding, as_float, exact_dtype, relative_distance
from posx.encodings.rope_scaling import RopeScaling, base_inv_freq, scaled_inv_freq
from posx.kernels.blocked import FarKeys, blocked_attend
from posx.kernels.memo import PositionMemo
from posx.kernels.rotary import Turn, fused_available, fused_turn
from posx.kernels.self_extend import (
    grouped_key_positions,
    grouped_query_positions,
    self_extend_attend,
)


class RoPE(PositionalEncoding):
    """Rotary encoding with a cos/sin table that grows on demand.

    Args:
        head_dim: Per-head width ``d_h``.
        base: Frequency base (10000 in the paper).
        rotary_fraction: Fraction of ``d_h`` that rotates; the rotated width must be even.
        scaling: Inference-time scaling (a :class:`RopeScaling` or a mapping of its fields,
            e.g. ``{"type": "yarn", "factor": 4}``); ``None`` or type ``none`` for plain RoPE.
        train_length: Training length; the default of ``scaling.original_length``.
    """

    #: Most queries per block when ReRoPE computes the scores itself (``blocked_attend``'s
    #: ``block_size``; it takes fewer at long lengths, keeping memory linear in ``s``).
    rerope_block_size: int = 256
    #: Most elements of the rotation copied per head (``[(b,) s, h, r/2]``, complex): the
    #: per-head forms that make the multiplies dense (``posx.kernels.rotary.turn_complex``)
    #: are kept up to 4 MiB each; beyond (evaluation at tens of thousands of positions) the
    #: broadcast one is used, so memory stays that of the ``[s, r/2]`` table.
    head_form_elements: int = 2**19
    #: The fused rotation (opt-in, issue 47): on CUDA, q and k each rotated by one compiled
    #: kernel (:func:`posx.kernels.rotary.fused_turn`) instead of the eager route's several,
    #: which launch-bound GPU steps pay for. Off until ``make bench-gpu``'s ``rope[fused]`` row
    #: measures it against ``rope``; set it on the encoding (``model.encoding.fused_rotation =
    #: True``). No effect on other devices; should the compiler fail, said once, eager again.
    fused_rotation: bool = False

    def __init__(
        self,
        head_dim: int,
        base: float = 10000.0,
        rotary_fraction: float = 1.0,
        scaling: RopeScaling | Mapping[str, Any] | None = None,
        train_length: int | None = None,
    ) -> None:
        super().__init__()
        if not 0.0 < rotary_fraction <= 1.0:
            raise ValueError(f"rotary_fraction must be in (0, 1], got {rotary_fraction}")
        rot = round(head_dim * rotary_fraction)
        if rot % 2 or rot == 0:
            raise ValueError(
                f"rotary dimension must be even and positive: head_dim {head_dim} x "
                f"rotary_fraction {rotary_fraction} = {rot}"
            )
        if base <= 1.0:
            raise ValueError(f"RoPE base must be > 1, got {base}")
        self.head_dim, self.rot_dim, self.base = head_dim, rot, float(base)
        self.scaling = RopeScaling.from_config(scaling, train_length)
        self.register_buffer("inv_freq", base_inv_freq(self.base, rot), persistent=False)
        # The frequencies actually used, computed once (dynamic NTK recomputes per length).
        freq = scaled_inv_freq(self.scaling, self.base, rot, seq_len=0)
        self.register_buffer("_freq", freq, persistent=False)
        self.attn_scale = self.scaling.attention_scale
        self.register_buffer("_cos", torch.empty(0, rot // 2), persistent=False)
        self.register_buffer("_sin", torch.empty(0, rot // 2), persistent=False)
        self._table_len = -1  # dynamic NTK: the length the table is for; -1: static table
        self._table_version = 0  # bumped on each rebuild, so memoised lookups go stale
        self._memo = PositionMemo()

    # --- frequencies and tables ------------------------------------------------------------

    def _dynamic_len(self, *positions: Tensor) -> int | None:
        """Sequence length that dynamic NTK scales for (``max position + 1``), else ``None``."""
        if self.scaling.type != "dynamic_ntk":
            return None
        seq_len = max(int(p.max()) for p in positions) + 1
        # Within the trained length the frequencies are the trained ones: use the static table.
        return seq_len if seq_len > (self.scaling.original_length or 0) else None

    def _frequencies(self, seq_len: int | None, device: torch.device) -> Tensor:
        if seq_len is None:
            return self._freq.to(device)
        return scaled_inv_freq(self.scaling, self.base, self.rot_dim, seq_len, device=device)

    def cos_sin(self, pos: Tensor, seq_len: int | None = None) -> tuple[Tensor, Tensor]:
        """The cos and sin ``[..., r/2]`` (float32) at ``pos``, the attention scale folded in.

        Integer positions index a cached table; float positions are computed directly.

        Args:
            pos: ``[s]`` or ``[b, s]``.
            seq_len: Dynamic NTK's sequence length (``None`` for the other types).
        """
        if pos.is_floating_point():
            angles = pos.float().unsqueeze(-1) * self._frequencies(seq_len, pos.device)
            cos, sin = angles.cos(), angles.sin()
        else:
            need = int(pos.max()) + 1
            key = -1 if seq_len is None else seq_len
            if key != self._table_len or self._cos.device != pos.device:
                # Dynamic NTK: another length means other frequencies for every position.
                self._build_table(max(need, seq_len or 256), seq_len, pos.device)
            elif need > self._cos.shape[0]:
                self._build_table(max(need, 2 * self._cos.shape[0], 256), seq_len, pos.device)
            cos, sin = self._cos[pos], self._sin[pos]
            return cos, sin  # the table already carries the attention scale
        if self.attn_scale != 1.0:
            cos, sin = cos * self.attn_scale, sin * self.attn_scale
        return cos, sin

    def _build_table(self, size: int, seq_len: int | None, device: torch.device) -> None:
        """cos/sin ``[size, r/2]`` on ``device`` (the positions'), where lookups happen."""
        dtype = exact_dtype(device)  # float64: phases stay exact at 1e6 positions
        pos = torch.arange(size, device=device, dtype=dtype)
        freq = scaled_inv_freq(self.scaling, self.base, self.rot_dim, seq_len or 0, dtype, device)
        angles = pos[:, None] * freq
        self._cos = (angles.cos() * self.attn_scale).float()
        self._sin = (angles.sin() * self.attn_scale).float()
        self._table_len = -1 if seq_len is None else seq_len
        self._table_version += 1

    def turn(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """Rotates the first ``r`` dims of ``x [.., s, d_h]`` by ``cos, sin [.., s, r/2]``:
        pair ``(x_{2i}, x_{2i+1}) -> (x_{2i} cos - x_{2i+1} sin, x_{2i} sin + x_{2i+1} cos)``."""
        return self.turn_with(x, self.rotation(cos, sin, x.dtype))

    def rotation(self, cos: Tensor, sin: Tensor, dtype: torch.dtype) -> Tensor:
        """The rotation :meth:`turn_with` applies to ``dtype`` inputs: ``cos + i sin``
        ``[.., r/2]`` (complex) for float32/64; for other dtypes (bf16 under autocast, which has
        no complex type) ``[.., r, 2]`` holding the real form ``[cos, cos], [-sin, sin]``."""
        if dtype in (torch.float32, torch.float64):
            return torch.complex(cos.to(dtype), sin.to(dtype))
        cos_w = cos.repeat_interleave(2, dim=-1)
        sin_w = torch.stack((-sin, sin), dim=-1).flatten(-2)
        return torch.stack((cos_w, sin_w), dim=-1).to(dtype)

    def turn_with(self, x: Tensor, rotation: Tensor) -> Tensor:
        """Rotates the first ``r`` dims of ``x [.., s, d_h]`` by a :meth:`rotation`."""
        r = self.rot_dim
        rot, rest = (x, None) if r == x.shape[-1] else (x[..., :r], x[..., r:])
        if rotation.is_complex():
            pairs = rot.unflatten(-1, (r // 2, 2))
            if pairs.storage_offset() % 2 or any(st % 2 for st in pairs.stride()[:-1]):
                pairs = pairs.contiguous()  # a complex view needs even strides and offset
            out = torch.view_as_real(torch.view_as_complex(pairs) * rotation).flatten(-2)
        else:
            swapped = rot.unflatten(-1, (r // 2, 2)).flip(-1).flatten(-2)  # (x_{2i+1}, x_{2i})
            out = rot * rotation[..., 0] + swapped * rotation[..., 1]
        if rest is None:
            return out
        if self.attn_scale != 1.0:
            rest = rest * self.attn_scale  # the temperature applies to the whole score
        return torch.cat((out, rest), dim=-1)

    # --- the contract ----------------------------------------------------------------------

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        seq_len = self._dynamic_len(q_pos, k_pos)
        if self.fused_rotation and fused_available(q.device):
            fused = self._fused_rotate(q, k, q_pos, k_pos, seq_len)
            if fused is not None:
                return fused
        q_rot = self._rotation_at(q_pos, seq_len, q.dtype, q.shape[1])
        same = k_pos is q_pos and k.dtype == q.dtype and k.shape[1] == q.shape[1]
        k_rot = q_rot if same else self._rotation_at(k_pos, seq_len, k.dtype, k.shape[1])
        if len(q_rot) == 1 or len(k_rot) == 1:  # the real (bf16) form
            return self.turn_with(q, q_rot[0]), self.turn_with(k, k_rot[0])
        return Turn.apply(q, k, q_rot, k_rot, self.rot_dim, self.attn_scale)

    def _fused_rotate(
        self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, seq_len: int | None
    ) -> tuple[Tensor, Tensor] | None:
        """The queries and keys ``[b, h, s, d_h]`` rotated by the fused route (one kernel
        each), or ``None`` where it failed to compile (:func:`~posx.kernels.rotary.fused_turn`).
        """

        def cos_sin(pos: Tensor) -> tuple[Tensor, Tensor]:
            def compute() -> tuple[Tensor, Tensor]:  # [(b,) 1, s, r/2] float32
                cos, sin = self.cos_sin(pos, seq_len)
                axis = pos.dim() - 1  # the head axis, just before the sequence's
                return cos.unsqueeze(axis), sin.unsqueeze(axis)

            key = ("fused", seq_len, self._table_version)
            return self._memo.get(key, (pos,), compute)

        q_cs = cos_sin(q_pos)
        k_cs = q_cs if k_pos is q_pos else cos_sin(k_pos)
        q_out = fused_turn(q, *q_cs, self.rot_dim, self.attn_scale)
        k_out = None if q_out is None else fused_turn(k, *k_cs, self.rot_dim, self.attn_scale)
        return None if k_out is None else (q_out, k_out)

    def _rotation_at(
        self, pos: Tensor, seq_len: int | None, dtype: torch.dtype, heads: int
    ) -> tuple[Tensor, ...]:
        """The rotation at ``pos``, looked up once, then reused by every layer and by later
        steps at the same positions: for float32/64, the complex ``[(b,) 1, s, r/2]``, the same
        ``[(b,) s, heads, r/2]``, the conjugates of both (the backward's) and the rotation
        ``[(b,) s, 2, heads, r/2]`` of q and k side by side (the per-head forms empty above
        :attr:`head_form_elements`); else the real form ``[(b,) 1, s, r, 2]`` alone (see
        :meth:`rotation`)."""

        def compute() -> tuple[Tensor, ...]:
            # The head axis goes just before the sequence axis, counted from the front: the
            # complex form ends in ``[s, r/2]`` but the real (bf16) form in ``[s, r, 2]``.
            rot = self.rotation(*self.cos_sin(pos, seq_len), dtype).unsqueeze(pos.dim() - 1)
            if not rot.is_complex():
                return (rot,)
            # conj() alone is a lazy bit that every multiply would resolve into a copy
            conj = rot.conj().resolve_conj()
            if rot.numel() * heads > self.head_form_elements:  # long evaluations: no copies
                none = rot.new_empty(0)  # (the memo holds tensors only)
                return rot, none, conj, none, none
            rot_sh = rot.transpose(-3, -2).expand(*pos.shape, heads, -1).contiguous()
            rot_qk = rot_sh.unsqueeze(-3).expand(*pos.shape, 2, heads, -1).contiguous()
            return rot, rot_sh, conj, rot_sh.conj().resolve_conj(), rot_qk

        return self._memo.get((seq_len, dtype, heads, self._table_version), (pos,), compute)

    @property
    def has_attend(self) -> bool:
        # Only ReRoPE and Self-Extend need two score sets per query; every other type stays on
        # fused SDPA.
        return self.scaling.type in ("rerope", "selfextend")

    def attend(self, q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """ReRoPE (Su 2023): score with relative position ``min(i - j, w)``.

        Pairs closer than ``w`` use the ordinary rotated q and k; farther pairs use q rotated
        to position ``w`` against unrotated k, i.e. relative position exactly ``w``. Runs in
        :func:`~posx.kernels.blocked.blocked_attend` (query blocks, memory linear in ``s``);
        without a gradient, keys at least ``w`` before a whole block are all "far": they take
        its fused kernel and only the near band is scored here.

        Args:
            q: Queries ``[b, h, sq, d_h]``.
            k: Keys ``[b, h, sk, d_h]``.
            v: Values ``[b, h, sk, d_h]``.
            q_pos: ``[sq]`` or ``[b, sq]``.
            k_pos: ``[sk]`` or ``[b, sk]``.

        Returns:
            ``[b, h, sq, d_h]``.
        """
        if not self.has_attend:
            raise NotImplementedError(f"RoPE with scaling {self.scaling.type!r} has no attend")
        if self.scaling.type == "selfextend":
            return self._self_extend(q, k, v, q_pos, k_pos)
        w = self.scaling.rerope_window
        q_near, k_near = self.rotate(q, k, q_pos, k_pos)
        q_far = self.turn(q, *self.cos_sin(torch.tensor([w], device=q.device)))
        scale = 1.0 / math.sqrt(q.shape[-1])
        # Keys transposed once, rather than copied transposed in every block's matmul.
        k_near_t, k_t = k_near.transpose(-1, -2).contiguous(), k.transpose(-1, -2).contiguous()
        q_at, k_at = as_float(q_pos), as_float(k_pos)

        def scores(i0: int, i1: int, j0: int) -> tuple[Tensor, None]:
            near = q_near[..., i0:i1, :] @ k_near_t[..., j0:i1]
            far = q_far[..., i0:i1, :] @ k_t[..., j0:i1]
            dist = relative_distance(q_at[..., i0:i1], k_at[..., j0:i1])
            if dist.dim() == 3:  # [b, sq, sk] -> [b, 1, sq, sk]
                dist = dist.unsqueeze(1)
            return torch.where(dist < w, near, far).float().mul_(scale), None

        def far_keys() -> FarKeys:  # distance >= w: q rotated to w against unrotated k
            return FarKeys(distance=w, q=q_far, k=k, scale=scale, q_pos=q_pos, k_pos=k_pos)

        return blocked_attend(v, scores, self.rerope_block_size, far=far_keys)

    def _self_extend(self, q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """Self-Extend's merged attention (:mod:`posx.kernels.self_extend`): q and k rotated
        at their own positions for keys within the neighbour window, at the grouped positions
        beyond it. Shapes as :meth:`attend`'s."""
        group, window = int(self.scaling.factor), self.scaling.rerope_window
        near = self.rotate(q, k, q_pos, k_pos)
        gq = grouped_query_positions(q_pos, group, window)
        grouped = self.rotate(q, k, gq, grouped_key_positions(k_pos, group))
        return self_extend_attend(near, grouped, v, (q_pos, k_pos), window, self.rerope_block_size)

    def extra_repr(self) -> str:
        out = f"head_dim={self.head_dim}, rot_dim={self.rot_dim}, base={self.base}"
        if self.scaling.type != "none":
            out += f", scaling={self.scaling}"
        return out
