"""Every encoding builds on the ``meta`` device, as the memory preflight of ``posx train`` and
``posx eval`` builds it (issue 30: deberta and xpos crashed there, so `posx train` could not
train them), and answers what the estimates ask of it without reading data."""

from __future__ import annotations

import pytest
import torch

from posx.config.build import build_model, build_positions
from posx.config.compose import CONFIG_DIR, compose
from posx.runs.resources import ModelShape

ENCODINGS = sorted(p.stem for p in (CONFIG_DIR / "encoding").glob("*.yaml"))


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_every_encoding_builds_on_meta(encoding: str):
    cfg = compose(
        [f"encoding={encoding}", "model.d_model=32", "model.n_heads=4", "train.length=16"]
    )
    with torch.device("meta"):
        model = build_model(cfg, vocab_size=50)
    assert ModelShape.of(model).params == model.num_parameters() > 0
    for length in (16, 64, 10**6):
        model.encoding.unsupported_reason(length)  # a reason or None; never a crash
    build_positions(cfg).check(model.encoding, 16, 16)
