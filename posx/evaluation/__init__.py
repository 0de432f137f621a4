"""The evaluator's parts: protocols (which windows are read and scored), position buckets,
the held-out data cache and peak-memory measurement. :mod:`posx.evaluation.sweep` runs the sweep."""
