"""``posx extend hf:NAME_OR_DIR``: fine-tuning a pretrained model to a longer context.

Modules, from the command down: ``run`` (the run directory, resume, evaluation), ``plan`` (the
model, method, lengths and memory, all before any weight is loaded: ``--dry-run``), ``train``
(the loop, sharded checkpoints), ``memory`` (the memory preflight), ``method``
(configs/extension/ read as RoPE scalings), ``settings`` (the command's settings), ``data``
(held-in windows) and ``engine`` (one process or FSDP2). They build on the rest of
:mod:`posx.pretrained` (loading, scaling, evaluation), which never imports them.
"""
