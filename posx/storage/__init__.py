"""Storage: the files a run leaves, every one written atomically.

:mod:`~posx.storage.atomic` (temporary file + ``os.replace``), :mod:`~posx.storage.results`
(run directories, ``run.json``, CSV tables merged under a lock) and
:mod:`~posx.storage.checkpoint` (safetensors weights, optimizer and trainer state).
"""
