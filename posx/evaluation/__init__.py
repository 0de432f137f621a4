"""Evaluation: one run's length sweep and the protocols, buckets, data and memory it uses.

:mod:`~posx.evaluation.sweep` evaluates a run at many lengths and writes ``eval.csv``;
:mod:`~posx.evaluation.protocol` says which windows are read and scored (full or sliding),
:mod:`~posx.evaluation.buckets` groups the loss by position, :mod:`~posx.evaluation.data` caches
the held-out sequences every run of a task shares, and :mod:`~posx.evaluation.memory` measures
peak memory.
"""
