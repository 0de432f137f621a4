"""Position buckets: edges, parsing, and sums over a hand-made tally."""

from __future__ import annotations

import pytest
import torch

from posx.config.validate import parse_buckets
from posx.errors import ConfigError
from posx.evaluation.buckets import bucket_edges, bucket_rows
from posx.evaluation.protocol import Tally


def test_log_edges_are_powers_of_two_ending_at_the_length():
    assert bucket_edges("log", 1) == [0, 1]
    assert bucket_edges("log", 8) == [0, 1, 2, 4, 8]
    assert bucket_edges("log", 10) == [0, 1, 2, 4, 8, 10]
    assert bucket_edges("LOG", 3) == [0, 1, 2, 3]


def test_fixed_width_edges():
    assert bucket_edges("4", 10) == [0, 4, 8, 10]
    assert bucket_edges(5, 10) == [0, 5, 10]
    assert bucket_edges(64, 10) == [0, 10]


@pytest.mark.parametrize("spec", ["0", "-3", "linear", "", "2.5"])
def test_bad_bucket_specs(spec):
    with pytest.raises(ConfigError, match="eval buckets must be 'log' or a positive width"):
        parse_buckets(spec)


def test_bucket_rows_by_hand():
    tally = Tally.zeros(length=6, sequences=1)
    tally.loss[:] = torch.tensor([0.0, 0.0, 3.0, 1.0, 2.0, 6.0], dtype=torch.float64)
    tally.count[:] = torch.tensor([0, 0, 1, 1, 2, 2])
    tally.hits[:] = torch.tensor([0, 0, 1, 0, 2, 0])
    rows = bucket_rows(tally, "log")  # [0,1) [1,2) are empty and left out
    assert rows == [
        {"bucket_start": 2, "bucket_end": 4, "tokens": 2, "loss": 2.0, "acc": 0.5},
        {"bucket_start": 4, "bucket_end": 6, "tokens": 4, "loss": 2.0, "acc": 0.5},
    ]
