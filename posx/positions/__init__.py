"""Training-time position strategies: they change only the ``pos`` tensor the model receives.

- ``default``: ``pos = arange(length)`` in training and evaluation.
- ``randomized`` (Ruoss et al. 2023, "Randomized Positional Encodings Boost Length
  Generalization of Transformers"): each training sequence gets ``length`` positions sampled
  without replacement from ``[0, max_pos)`` and sorted, so the model sees positions up to
  ``max_pos`` while training on short sequences; optionally the same at evaluation.
- ``pose`` (Zhu et al. 2023, "PoSE: Efficient Context Window Extension of LLMs via Positional
  Skip-wise Training"): the training window is cut into ``chunks`` contiguous pieces at random
  points; chunk ``c > 0`` is shifted by an offset ``u_c`` drawn from ``[u_{c-1}, target_length -
  length]`` (non-decreasing, as in the paper), so positions stay increasing and cover
  ``[0, target_length)``. Evaluation uses ``arange``.

- ``coupling`` (Cho et al. 2024, "Position Coupling: Improving Length Generalization of
  Arithmetic Transformers Using Task Structure"): digits of the same significance in every
  operand share one position ID, and so does the token that predicts the answer's digit of that
  significance; a random start offset in training. Works with every encoding that reads ``pos``.
- ``abacus`` (McLeish et al. 2024): a digit's position is its index within its number (1 for
  the units digit, 0 for non-digits), plus a random offset in training; meant for
  ``encoding=abacus`` (the learned table the paper adds to token embeddings).

The last two read the task's per-token structure (:meth:`posx.tasks.base.Task.structure`):
they declare ``needs_structure`` and implement :meth:`PositionStrategy.structured`, and the
trainer and evaluator hand them the structure; they never ask which task it is.

Every strategy samples per sequence (``[b, s]`` positions) from the generator it is given, so a
run is reproducible from its seed.

One module per strategy (:mod:`~posx.positions.base` holds the interface and ``default``);
:mod:`~posx.positions.steps` draws a training step's positions. Configs name the classes here
(``_target_: posx.positions.PoSEPositions``), as saved runs do.
"""

from __future__ import annotations

from posx.positions.base import DefaultPositions, PositionStrategy
from posx.positions.pose import PoSEPositions, pose_positions
from posx.positions.randomized import RandomizedPositions, randomized_positions
from posx.positions.steps import step_positions, structured_step_positions
from posx.positions.structured import AbacusPositions, CoupledPositions, StructuredPositions

__all__ = [
    "AbacusPositions",
    "CoupledPositions",
    "DefaultPositions",
    "PoSEPositions",
    "PositionStrategy",
    "RandomizedPositions",
    "StructuredPositions",
    "pose_positions",
    "randomized_positions",
    "step_positions",
    "structured_step_positions",
]
