"""RULER's synthetic long-context tasks (Hsieh et al. 2024) as plain Python.

The prompts, the haystack-size search that fits a prompt to a length in a model's own tokens,
and the scoring. Nothing here imports torch or Hydra: a task turns a random generator, a
haystack size and a needle depth into a :class:`~posx.ruler.sample.Sample` (the text, its answer
prefix and the strings a right answer contains), and :mod:`posx.ruler.fit` finds the size from
a token-count callable. Running a model over the samples is :mod:`posx.pretrained.ruler`'s work.
"""
