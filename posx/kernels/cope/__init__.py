"""CoPE's attention kernels (Golovneva et al. 2024).

Modules: ``attention`` (the attention, one query block at a time, training and evaluation
routes), ``layer`` (a layer's interpolation table, gate suffix sums and inputs laid out for the
routes) and ``native`` (the fused C kernel for evaluation on the CPU, built by
:mod:`posx.kernels.native`; ``None`` where it does not apply).
"""
