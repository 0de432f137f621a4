"""Runtime: where and how computation runs (devices, DDP process groups, numeric precision).

:mod:`~posx.runtime.distributed` (torchrun, gloo/nccl, sharding, device choice) and
:mod:`~posx.runtime.precision` (autocast and gradient scaling for ``train.precision``).
"""
