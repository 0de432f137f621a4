"""Attention kernels, below the encodings that use them: query-blocked attention with a bias
(:mod:`~posx.kernels.bias`) or an encoding's own scores (:mod:`~posx.kernels.blocked`),
FlexAttention (:mod:`~posx.kernels.flex`) and the per-forward memo of position-only tensors
(:mod:`~posx.kernels.memo`). Pure torch: a kernel takes functions and tensors, never an
encoding's class."""
