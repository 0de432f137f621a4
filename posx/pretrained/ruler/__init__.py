"""RULER's tasks (:mod:`posx.ruler`) on a pretrained model.

Prompts in its tokens, greedy batched generation, rows for ``eval.csv`` (``posx eval hf:NAME
--suite ruler``).
"""
