"""Files a run leaves: atomic writes, run directories and their tables
(:mod:`~posx.storage.results`), and checkpoints (:mod:`~posx.storage.checkpoint`)."""
