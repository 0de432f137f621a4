"""Attention kernels: blocked attention, per-distance bias tables, FlexAttention, position memo.

They sit below the encodings that use them and take functions and tensors, never an encoding's
class: :mod:`~posx.kernels.bias` (query-blocked SDPA with an additive bias),
:mod:`~posx.kernels.blocked` (query-blocked softmax over an encoding's own scores, for the
``attend`` encodings), :mod:`~posx.kernels.flex` (FlexAttention: a per-distance table, a
``score_mod`` per pair, an encoding's scores as tables) and :mod:`~posx.kernels.memo`
(position-only tensors reused within a forward).

Their helpers: :mod:`~posx.kernels.relative` (relative shifts and distance blocks),
:mod:`~posx.kernels.sdpa_mask` (the mask layout CUDA's SDPA needs),
:mod:`~posx.kernels.flash` (the CPU's flash kernel with its log-sum-exp, and merging by it) and
:mod:`~posx.kernels.near_band` (attention whose far keys share one term: one flash call plus a
near band, the encoding's terms on it in :mod:`~posx.kernels.band_terms`).

Encodings whose arithmetic needs a kernel of its own keep it here too:
:mod:`~posx.kernels.rotary` (RoPE's rotation), :mod:`~posx.kernels.cope` (CoPE's attention,
with its tables in :mod:`~posx.kernels.cope.layer` and its fused C kernel for evaluation in
:mod:`~posx.kernels.cope.native`), :mod:`~posx.kernels.disentangled` (DeBERTa's c2p and p2c
terms) and :mod:`~posx.kernels.ode` (FLOATER's RK4 solve). Which kernel runs is chosen in
:mod:`posx.model.attention`.

:mod:`~posx.kernels.native` builds the C kernels (``native/*.c``) on first use with the system's
compiler; every caller keeps a PyTorch path for where that cannot be done.
"""
