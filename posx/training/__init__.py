"""Training: the loop, what a run records, clean stops and exact resumes, optimizer and losses.

:mod:`~posx.training.loop` trains one model; :mod:`~posx.training.record` writes ``run.json``
and the ``metrics.csv`` rows; :mod:`~posx.training.resume` stops at a step boundary and resumes
bit for bit; :mod:`~posx.training.optim`, :mod:`~posx.training.losses` and
:mod:`~posx.training.progress` are the optimizer and schedule, the loss and the progress line.
"""
