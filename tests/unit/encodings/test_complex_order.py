"""Complex-order embeddings (Wang et al. 2020): f(w, pos) = r e^{i(omega pos + theta)}."""

from __future__ import annotations

import math

import pytest
import torch

from posx.encodings.complex_order import ComplexOrder, complex_order_embedding


def test_formula_by_hand():
    r, omega, theta = torch.tensor([2.0]), torch.tensor([0.5]), torch.tensor([0.25])
    got = complex_order_embedding(
        r.view(1, 1, 1), omega.view(1, 1, 1), theta.view(1, 1, 1), torch.tensor([3.0])
    )
    phase = 0.5 * 3 + 0.25
    torch.testing.assert_close(
        got.flatten(), torch.tensor([2 * math.cos(phase), 2 * math.sin(phase)])
    )


def as_complex(emb: torch.Tensor) -> torch.Tensor:
    half = emb.shape[-1] // 2
    return torch.complex(emb[..., :half], emb[..., half:])


@pytest.fixture
def enc():
    torch.manual_seed(0)
    enc = ComplexOrder(d_model=8)
    with torch.no_grad():
        enc.frequency.weight.normal_(std=0.3)  # per-word frequencies, as after training
    return enc


def test_moving_a_word_rotates_it_by_omega_times_the_shift(enc):
    """f(w, p + n) = f(w, p) * e^{i omega_w n}: word order as a per-word rotation."""
    x = torch.randn(1, 3, 8)
    with torch.no_grad():
        _, omega, _ = enc.word_parameters(x)
        at_p = as_complex(enc.embed(x, torch.tensor([0, 1, 2])))
        at_p_plus_5 = as_complex(enc.embed(x, torch.tensor([5, 6, 7])))
    torch.testing.assert_close(at_p_plus_5, at_p * torch.exp(1j * omega * 5), atol=1e-5, rtol=1e-5)
    # Different words have different frequencies.
    assert not torch.allclose(omega[0, 0], omega[0, 1])


def test_per_word_and_per_dimension(enc):
    """The embedding of a word depends on the word and its position only; amplitude is |f|."""
    x = torch.randn(1, 1, 8).expand(1, 4, 8)  # the same word four times
    with torch.no_grad():
        r, _, _ = enc.word_parameters(x)
        emb = as_complex(enc.embed(x, torch.tensor([4, 4, 9, 9])))
    torch.testing.assert_close(emb[0, 0], emb[0, 1])
    torch.testing.assert_close(emb.abs(), r.abs(), atol=1e-6, rtol=1e-5)


def test_initial_frequencies_are_sinusoidal():
    enc = ComplexOrder(d_model=8, base=100.0)
    torch.testing.assert_close(enc.frequency.bias, 100.0 ** (-2 * torch.arange(4) / 8))
    assert enc.frequency.weight.abs().sum() == 0
    with pytest.raises(ValueError, match="even"):
        ComplexOrder(d_model=7)


def test_phases_stay_float32_under_bf16_autocast():
    """omega and theta come out of float32 linears even under autocast: a bf16 omega at
    position 1000 is off by radians (8% error before the fix; 0.3% now, from bf16 r)."""
    torch.manual_seed(0)
    enc = ComplexOrder(32)
    x = torch.randn(2, 8, 32, generator=torch.Generator().manual_seed(1))
    pos = torch.arange(1000, 1008)
    with torch.no_grad():
        ref = enc.embed(x, pos)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = enc.embed(x, pos)
    assert got.shape == ref.shape
    assert (got.float() - ref).norm() / ref.norm() < 0.01
