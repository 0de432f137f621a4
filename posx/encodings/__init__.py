"""Positional encodings: one module per family, all following :mod:`posx.encodings.base`."""

from posx.encodings.alibi import ALiBi, alibi_slopes
from posx.encodings.base import NoPE, PositionalEncoding
from posx.encodings.learned import Learned
from posx.encodings.rope import RoPE
from posx.encodings.sinusoidal import Sinusoidal, sinusoidal_table
from posx.encodings.t5 import T5Bias, t5_bucket

__all__ = [
    "ALiBi",
    "Learned",
    "NoPE",
    "PositionalEncoding",
    "RoPE",
    "Sinusoidal",
    "T5Bias",
    "alibi_slopes",
    "sinusoidal_table",
    "t5_bucket",
]
