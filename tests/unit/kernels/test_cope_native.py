"""CoPE's fused C kernel (posx/kernels/native/cope_band.c through posx/kernels/cope/native.py)
against the former implementation (autograd's graph of the formula over blocked_attend, kept in
test_cope_fast.py): every head width the kernel specialises and a generic one, every kind of
positions, the band with its far part, rows whose positions fall short of the top within the
band, its error against the formula in float64 at thousands of positions (within 3x the float32
PyTorch route's), training's backward in the kernel against the PyTorch route's, values of
another head size (declined), and the layer through ``CoPE.attend`` and ``posx eval``. Then the
builder: the cache, a
damaged cached library, no compiler, a compile error, the switch."""

from __future__ import annotations

import copy
import logging
import zlib
from pathlib import Path

import pytest
import torch

import posx.kernels.cope.attention as kernel
from posx.kernels import native
from posx.kernels.cope import native as cope_native
from tests.unit.encodings.test_cope_fast import (
    KINDS,
    _inputs,
    _positions,
    assert_as_accurate,
    assert_as_accurate_as,
    assert_near,
    reference_attend,
)

needs_kernel = pytest.mark.skipif(
    not cope_native.available(), reason="no C compiler here: the PyTorch routes are tested"
)

SHAPES = [  # b, h, s, d, npos_max: d 16/32/64/128 specialised, 8 and 24 generic
    (2, 3, 8, 16, 16),
    (1, 2, 37, 8, 6),
    (2, 2, 70, 24, 4),
    (1, 2, 129, 32, 32),
    (2, 1, 50, 64, 8),
    (1, 1, 20, 128, 5),
]


@pytest.fixture
def native_calls(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Each call of the kernel's entry from cope_attention: True where it returned a result."""
    calls: list[bool] = []
    real = kernel.cope_native

    def spy(*args):
        out = real(*args)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(kernel, "cope_native", spy)
    return calls


@needs_kernel
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", KINDS)
def test_equals_the_former_implementation(native_calls, shape, kind):
    gen = torch.Generator().manual_seed(zlib.crc32(repr((shape, kind)).encode()))
    b, h, s, d, npos_max = shape
    enc, q, k, v = _inputs(b, h, s, d, npos_max, 256, gen)
    pos = _positions(kind, b, s, gen)
    with torch.inference_mode():
        got = enc.attend(q, k, v, pos, pos)
        assert_as_accurate(got, enc, q, k, v, pos)
    assert native_calls == [True]


def _output_and_grads(enc, q, k, v, weights, attend):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = attend(enc, *leaves)
    wrt = [*leaves, enc.layers[0].pos_emb]
    return [out.detach(), *torch.autograd.grad((out * weights.to(out.dtype)).sum(), wrt)]


@needs_kernel
@pytest.mark.parametrize("kind", KINDS)
def test_training_backward_in_the_kernel(kind, monkeypatch):
    """The kernel's training blocks take its backward too (cope_block_backward: each query row
    from its own key on, the future keys' entries left unwritten by the forward), and every
    gradient equals the PyTorch route's on the same inputs up to float32 rounding: unit gaps,
    gaps, and negative gaps (positions clamped at 0)."""
    backward_calls: list[bool] = []
    real = kernel.native_backward

    def spy(*args):
        backward_calls.append(True)
        return real(*args)

    monkeypatch.setattr(kernel, "native_backward", spy)
    gen = torch.Generator().manual_seed(zlib.crc32(repr(("backward", kind)).encode()))
    b, h, s, d, npos_max = 2, 2, 70, 16, 24
    enc, q, k, v = _inputs(b, h, s, d, npos_max, 16, gen)
    pos = _positions(kind, b, s, gen)
    weights = torch.randn(b, h, s, d, generator=gen)
    attend = lambda e, *t: e.attend(*t, pos, pos)  # noqa: E731
    got = _output_and_grads(enc, q, k, v, weights, attend)
    assert len(backward_calls) == 5  # one per block of 16 queries
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kernel, "native_layer", lambda *a: None)
        ref = _output_and_grads(enc, q, k, v, weights, attend)
    for name, a, r in zip(["out", "q", "k", "v", "emb"], got, ref, strict=True):
        assert_near(a, r, 1e-5, name)


@needs_kernel
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", KINDS)
def test_training_blocks_as_accurate_as_pytorch(shape, kind, monkeypatch):
    """With gradients, the explicit route's blocks (16 queries each) come from the kernel, and
    the output and every gradient (q, k, v, the embeddings, through the written-out backward)
    are as close to the former implementation in float64 as that one in float32 is
    (:func:`assert_as_accurate_as`)."""
    calls: list[bool] = []
    real = kernel.native_layer
    monkeypatch.setattr(kernel, "native_layer", lambda *a: calls.append(True) or real(*a))
    gen = torch.Generator().manual_seed(zlib.crc32(repr(("train", shape, kind)).encode()))
    b, h, s, d, npos_max = shape
    enc, q, k, v = _inputs(b, h, s, d, npos_max, 16, gen)
    pos = _positions(kind, b, s, gen)
    weights = torch.randn(b, h, s, d, generator=gen)
    got = _output_and_grads(enc, q, k, v, weights, lambda e, *t: e.attend(*t, pos, pos))
    former = lambda e, *t: reference_attend(e, *t, pos)  # noqa: E731
    ref32 = _output_and_grads(enc, q, k, v, weights, former)
    enc64 = copy.deepcopy(enc).double()
    ref64 = _output_and_grads(enc64, q.double(), k.double(), v.double(), weights, former)
    assert calls
    for name, a, r32, r64 in zip(["out", "q", "k", "v", "emb"], got, ref32, ref64, strict=True):
        assert_as_accurate_as(a, r32, r64, name)


@needs_kernel
@pytest.mark.parametrize(("std", "short"), [(0.3, False), (1.5, True)])
@pytest.mark.parametrize("d", [16, 24])
def test_band_with_its_far_part(native_calls, std, short, d):
    """300 tokens, npos_max 8 (band 20): later queries take 21 keys in the kernel and the rest
    through the flash kernel; with spread gates some positions fall short of the top within
    the band, and those queries take all of their keys in the kernel (``full``)."""
    gen = torch.Generator().manual_seed(11)
    b, h, s, npos_max = 2, 3, 300, 8
    enc, q, k, v = _inputs(b, h, s, d, npos_max, 16, gen, std=std)
    pos = torch.arange(s)
    band = 5 * npos_max // 2
    with torch.no_grad():
        got = enc.attend(q, k, v, pos, pos)
        assert_as_accurate(got, enc, q, k, v, pos)
        emb = enc.layers[0].pos_emb
        layer = kernel.CoPELayer(q, k, v, emb, None, npos_max)
        full = cope_native.native_layer(layer).band(band + 1)[2]
    assert native_calls == [True]
    assert full[..., : band + 1].all()  # no keys further back
    assert bool(full[..., band + 1 :].any()) == short


@needs_kernel
def test_long_rows_and_all_keys():
    """A sequence longer than the band with unit gaps and a band as wide as the sequence: the
    kernel alone, equal to the fused PyTorch route."""
    gen = torch.Generator().manual_seed(12)
    q, k, v = (torch.randn(1, 2, 700, 16, generator=gen) * 0.4 for _ in range(3))
    emb = torch.randn(16, 64, generator=gen)
    with torch.no_grad():
        got = cope_native.cope_native(kernel.CoPELayer(q, k, v, emb, None, 64), k, v, 1000)
        ref = kernel._fused_blocks(kernel.CoPELayer(q, k, v, emb, None, 64), 256, 0)
    assert_near(got, ref, 1e-5)


LONG = [  # b, h, s, d, npos_max: positions into the thousands (gates average 1/2)
    (1, 2, 1024, 16, 1024),
    (1, 1, 2048, 32, 2048),
    (1, 2, 2048, 16, 512),  # band 1281 keys, the keys further back through the flash kernel
    (2, 2, 64, 16, 8),
    (1, 2, 128, 16, 64),
]


def _max_errors(enc, q, k, v, pos, grad: bool) -> tuple[float, float]:
    """Largest elementwise errors of the kernel's output and of the float32 PyTorch route's
    (the C kernel off) against the former implementation in float64, on the same inputs;
    with ``grad``, through the training route (CoPEAttention's blocks)."""

    def attend(e, *t):
        with torch.set_grad_enabled(grad):
            leaves = [x.detach().clone().requires_grad_(grad) for x in t]
            return e.attend(*leaves, pos, pos).detach().double()

    with torch.no_grad():
        ref64 = reference_attend(
            copy.deepcopy(enc).double(), q.double(), k.double(), v.double(), pos
        )
    got = attend(enc, q, k, v)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kernel, "cope_native", lambda *a: None)
        mp.setattr(kernel, "native_layer", lambda *a: None)
        route = attend(enc, q, k, v)
    return (got - ref64).abs().max().item(), (route - ref64).abs().max().item()


@needs_kernel
@pytest.mark.parametrize("shape", LONG)
@pytest.mark.parametrize("grad", [False, True], ids=["evaluation", "training"])
def test_as_accurate_as_pytorch_at_thousands_of_positions(shape, grad, monkeypatch):
    """Positions summed over up to 2,048 gates: the kernel's largest error against the formula
    in float64 stays within 3x the float32 PyTorch route's (whose cumulative sums add in
    double). A float32 running sum of the gates drifts with the number of keys: at 1-2k
    positions it was 7-13x the route's."""
    calls: list[bool] = []
    real = cope_native.native_layer
    spy = lambda *a: calls.append(True) or real(*a)  # noqa: E731
    monkeypatch.setattr(kernel, "native_layer", spy)  # training
    monkeypatch.setattr(cope_native, "native_layer", spy)  # evaluation, from cope_native()
    gen = torch.Generator().manual_seed(zlib.crc32(repr(("long", shape)).encode()))
    b, h, s, d, npos_max = shape
    enc, q, k, v = _inputs(b, h, s, d, npos_max, 256, gen)
    pos = torch.arange(s)
    kernel_error, route_error = _max_errors(enc, q, k, v, pos, grad)
    assert calls  # the kernel ran
    assert kernel_error <= 3 * route_error, f"{kernel_error:.2e} (PyTorch: {route_error:.2e})"


@needs_kernel
@pytest.mark.parametrize("grad", [False, True], ids=["evaluation", "training"])
@pytest.mark.parametrize("d_v", [8, 32])
def test_values_of_another_head_size_take_the_pytorch_route(native_calls, d_v, grad):
    """Values with another head size than the queries (16): the kernel declines (it reads
    values as rows of the queries' size) and the PyTorch route answers, the flash kernel
    aside (it takes one head size), as the former implementation does."""
    gen = torch.Generator().manual_seed(14)
    b, h, s, npos_max = 1, 2, 60, 8
    enc, q, k, _ = _inputs(b, h, s, 16, npos_max, 16, gen)
    v = torch.randn(b, h, s, d_v, generator=gen)
    pos = torch.arange(s)
    assert (
        cope_native.native_layer(kernel.CoPELayer(q, k, v, enc.layers[0].pos_emb, None, 8)) is None
    )
    with torch.set_grad_enabled(grad):
        got = enc.attend(q.clone().requires_grad_(grad), k, v, pos, pos)
    with torch.no_grad():
        ref = reference_attend(enc, q, k, v, pos)
    assert got.shape == (b, h, s, d_v)
    assert_near(got.detach(), ref, 1e-5)
    assert not any(native_calls)


def test_not_taken_where_it_does_not_apply(native_calls):
    """float64, a head width that is not a multiple of 8, and gradients take the PyTorch
    routes."""
    gen = torch.Generator().manual_seed(13)
    enc, q, k, v = _inputs(1, 2, 30, 8, 6, 256, gen)
    pos = torch.arange(30)
    with torch.no_grad():
        ref = reference_attend(enc.double(), q.double(), k.double(), v.double(), pos)
        got = enc.attend(q.double(), k.double(), v.double(), pos, pos)
    assert_near(got, ref, 1e-5)
    enc, q, k, v = _inputs(1, 2, 30, 12, 6, 256, gen)
    with torch.no_grad():
        assert_near(enc.attend(q, k, v, pos, pos), reference_attend(enc, q, k, v, pos), 1e-5)
    enc.attend(q.requires_grad_(), k, v, pos, pos)
    assert native_calls == [False, False]  # the gradient call never asks


@needs_kernel
def test_posx_eval_takes_the_kernel(cli, tmp_path, native_calls):
    """Through the command a user types: ``posx eval`` of a trained CoPE run at 4x its
    training length (past the band) runs the kernel, and its rows match the PyTorch routes'."""
    import pandas as pd

    from tests.conftest import TINY

    trained = cli("train", *TINY, "train.steps=2", "encoding=cope", "model.d_model=64",
                  f"root={tmp_path}")  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    (run_json,) = tmp_path.rglob("run.json")
    out = cli("eval", str(run_json.parent), "--lengths", "64", "--no-progress")
    assert out.returncode == 0, out.stderr
    assert native_calls and all(native_calls)
    rows = pd.read_csv(run_json.parent / "eval.csv").set_index("eval_length")
    assert rows.loc[64, "status"] == "ok"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kernel, "cope_native", lambda *a: None)
        again = cli("eval", str(run_json.parent), "--lengths", "64", "--no-progress")
    assert again.returncode == 0, again.stderr
    eager = pd.read_csv(run_json.parent / "eval.csv").set_index("eval_length")
    assert abs(eager.loc[64, "loss"] - rows.loc[64, "loss"]) < 1e-5


# ----------------------------------------------------------------------------- the builder


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch: pytest.MonkeyPatch):
    """An empty cache directory and no library loaded yet in this process."""
    monkeypatch.setenv(native.ENV_CACHE, str(tmp_path / "cache"))
    monkeypatch.delenv(native.ENV_SWITCH, raising=False)
    monkeypatch.setattr(native, "_loaded", {})
    return tmp_path / "cache"


def _compiles(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    calls: list[list[str]] = []
    real = native._compile
    monkeypatch.setattr(native, "_compile", lambda c, f, *a: calls.append(f) or real(c, f, *a))
    return calls


@needs_kernel
def test_built_once_then_loaded_from_the_cache(fresh_cache, monkeypatch):
    compiles = _compiles(monkeypatch)
    assert native.load("cope_band") is not None
    (built,) = fresh_cache.glob("cope_band-*.so")
    assert len(compiles) == 1
    monkeypatch.setattr(native, "_loaded", {})  # a later process
    assert native.load("cope_band") is not None
    assert len(compiles) == 1 and list(fresh_cache.iterdir()) == [built]


@pytest.fixture(scope="module")
def cope_library() -> Path:
    """The library this process built and loaded (its file is only ever copied: writing over a
    mapped library is a SIGBUS in this process when a page of it is next read)."""
    return Path(native.load("cope_band")._name)


@needs_kernel
@pytest.mark.parametrize("damage", ["truncated", "another library"])
def test_damaged_library_is_named_and_rebuilt(cope_library, fresh_cache, damage):
    """A later process finds the cached library truncated, or replaced by a library without the
    kernel's entry points: one line naming the file and the problem, then it is rebuilt and
    loads. (A subprocess: this one has the library loaded already.)"""
    import os
    import shutil
    import subprocess
    import sys

    fresh_cache.mkdir()  # the built library, as a build in this cache names it
    built = Path(shutil.copyfile(cope_library, fresh_cache / cope_library.name))
    if damage == "truncated":
        built.write_bytes(b"\x7fELF truncated")
    else:
        other = fresh_cache.parent / "other.c"
        other.write_text("int something_else(void) { return 1; }\n")
        subprocess.run(["cc", "-shared", "-fPIC", str(other), "-o", str(built)], check=True)
    code = (
        "from posx.kernels import native; from posx.kernels.cope import native as cope_native; "
        "print(native.load('cope_band', ('cope_band', 'cope_block')) is not None, "
        "cope_native.available())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
        env={**os.environ, native.ENV_CACHE: str(fresh_cache)}, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.split() == ["True", "True"], done.stderr
    (warning,) = [ln for ln in done.stderr.splitlines() if "PosxWarning" in ln]
    assert f"{built}: not a loadable library" in warning
    assert built.stat().st_size > 1000  # rebuilt in place


def test_no_compiler(fresh_cache, monkeypatch, caplog):
    monkeypatch.setenv("CC", str(fresh_cache / "no-such-cc"))
    with caplog.at_level(logging.INFO, logger=native.__name__):
        assert native.load("cope_band") is None
    assert "no C compiler" in caplog.text
    assert not fresh_cache.exists() or not any(fresh_cache.iterdir())


def test_compile_error_leaves_nothing_behind(fresh_cache, monkeypatch, caplog):
    if native.shutil.which("cc") is None:
        pytest.skip("no C compiler here")
    monkeypatch.setattr(native, "FLAG_SETS", [["-fno-such-flag-at-all"]])
    with caplog.at_level(logging.INFO, logger=native.__name__):
        assert native.load("cope_band") is None
    assert "could not build cope_band.c" in caplog.text
    assert list(fresh_cache.iterdir()) == []  # no half-written library, no temporary file


def test_switched_off(fresh_cache, monkeypatch):
    monkeypatch.setenv(native.ENV_SWITCH, "0")
    compiles = _compiles(monkeypatch)
    assert native.load("cope_band") is None and compiles == []
