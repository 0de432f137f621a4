"""Training: the loop (:mod:`~posx.training.loop`), its optimizer and schedule, losses and
progress lines."""
