"""TextTask with a byte-level BPE: lossless encoding, eval windows of full length over the
held-out split, caching, saved tokenizer files and their errors."""

from __future__ import annotations

import random
import sys

import pytest
import tokenizers
import torch

from posx.errors import ConfigError
from posx.tasks import tokenize
from posx.tasks.text import TextTask, UnsupportedLength

WORDS = ["the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "a", "on"]
WORDS += ["café", "naïve", "日本語", "def", "return", "x_1", "(", "):", "\n", "    "]


def prose(n_bytes: int, seed: int = 0) -> bytes:
    """Word salad with multi-byte characters, cut at ``n_bytes`` (maybe inside a character)."""
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n_bytes // 2)).encode()[:n_bytes]


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes(prose(20_000))
    return path


def bpe(path, tmp_path, **kw) -> TextTask:
    kw.setdefault("vocab_size", 300)
    return TextTask(str(path), val_fraction=0.1, tokenizer="bpe", cache_dir=str(tmp_path), **kw)


def test_bpe_encodes_the_training_split_losslessly(corpus, tmp_path):
    task = bpe(corpus, tmp_path / "cache")
    train = task.train_data.numpy().tobytes()
    assert task.tokenizer.decode(task.train_ids.tolist()) == train
    assert task.vocab_size == 300 and int(task.train_ids.max()) < 300
    assert len(task.train_ids) < len(train) / 2  # merges happened
    info = task.describe()
    assert info["tokenizer"] == "bpe" and info["vocab_size"] == 300
    assert info["bytes_per_token"] == pytest.approx(len(train) / len(task.train_ids), abs=1e-4)
    batch = task.train_batch(4, 16, torch.Generator().manual_seed(0))
    assert batch.inputs.shape == (4, 16) and batch.mask.all()
    assert torch.equal(batch.targets[:, :-1], batch.inputs[:, 1:])


def test_held_out_split_is_the_same_bytes_for_every_tokenizer(corpus, tmp_path):
    byte, sub = TextTask(str(corpus), val_fraction=0.1), bpe(corpus, tmp_path)
    assert torch.equal(byte.val_data, sub.val_data)
    assert torch.equal(byte.train_data, sub.train_data)


VAL_TOKENS = 846  # the BPE tokens of the 2000 held-out bytes after byte 0 (vocab 300)


@pytest.mark.parametrize(("length", "asked"), [(8, 40), (64, 5), (512, 1), (64, 10_000)])
def test_bpe_eval_windows_hold_length_tokens_each(corpus, tmp_path, length, asked):
    """A row labelled L reads L tokens at once: full windows of L BPE tokens over the held-out
    split from its start (as many bytes as they take), none of them padded."""
    task = bpe(corpus, tmp_path)
    val = corpus.read_bytes()[18_000:]
    assert len(task.tokenizer.encode(val[1:])) == VAL_TOKENS  # counted here, not by eval_set
    data = task.eval_set(length, asked, seed=0)
    rows = min(asked, VAL_TOKENS // length)  # what fits when more is asked for
    assert data.inputs.shape == (rows, length) and data.mask.all()
    assert torch.equal(data.targets[:, :-1], data.inputs[:, 1:])
    assert torch.equal(data.inputs[1:, 0], data.targets[:-1, -1])  # consecutive windows
    assert int(data.inputs[0, 0]) == task.tokenizer.byte_ids[val[0]]  # byte 0: context only
    covered = task.text_bytes(data)
    assert covered > rows * length  # sized for the tokenizer: more bytes than tokens
    text = val[1 : 1 + covered]
    assert task.tokenizer.decode(data.targets.flatten().tolist()) == text
    # Independently of posx's byte table: HF's own decoder gives back the same text.
    hf = task.tokenizer.tokenizer.decode(data.targets.flatten().tolist())
    assert hf == text.decode(errors="replace")


def test_held_out_split_too_short_for_one_window_says_how_many_tokens_it_has(corpus, tmp_path):
    task = bpe(corpus, tmp_path)
    assert task.eval_set(VAL_TOKENS, 1, seed=0).inputs.shape == (1, VAL_TOKENS)  # just fits
    message = (
        rf"the corpus validation split has {VAL_TOKENS + 1} tokens \(2000 bytes\), fewer than one "
        rf"sequence of {VAL_TOKENS + 1} tokens \(\+1 target\)"
    )
    with pytest.raises(UnsupportedLength, match=message):
        task.eval_set(VAL_TOKENS + 1, 1, seed=0)
    with pytest.raises(ConfigError):  # still a config error for callers outside the sweep
        task.eval_set(4096, 1, seed=0)


def test_byte_level_eval_set_is_unchanged(corpus):
    """Bytes: n windows of L over the held-out bytes [1, 1 + nL), the first input being byte 0."""
    task = TextTask(str(corpus), val_fraction=0.1)
    val = corpus.read_bytes()[18_000:]
    data = task.eval_set(16, 20, seed=0)
    assert data.inputs.shape == (20, 16) and data.mask.all() and data.inputs.dtype == torch.long
    assert rows_bytes(data.targets.flatten()) == val[1:321] and task.text_bytes(data) == 320
    assert rows_bytes(data.inputs.flatten()) == b"".join(val[i : i + 16] for i in range(0, 320, 16))


def rows_bytes(t: torch.Tensor) -> bytes:
    return bytes(t.to(torch.uint8).tolist())


def test_bytes_that_are_not_utf8_round_trip(tmp_path):
    noise = bytes(random.Random(1).randrange(256) for _ in range(500))
    path = tmp_path / "mixed.bin"
    path.write_bytes(prose(8000) + noise + prose(4000, seed=2) + b"\xff\xfe" + prose(3000, seed=3))
    task = TextTask(str(path), val_fraction=0.2, tokenizer="bpe", vocab_size=300)
    assert task.tokenizer.decode(task.train_ids.tolist()) == task.train_data.numpy().tobytes()
    data = task.eval_set(16, 50, seed=0)
    assert data.inputs.shape == (50, 16) and data.mask.all()
    val = path.read_bytes()[int(len(path.read_bytes()) * 0.8) :]
    text = val[1 : 1 + task.text_bytes(data)]
    assert task.tokenizer.decode(data.targets[data.mask].tolist()) == text


def test_tokenizer_and_token_ids_are_cached_and_reused(corpus, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    first = bpe(corpus, cache)
    names = sorted(p.name for p in cache.iterdir())
    assert len(names) == 2 and names[0].startswith("bpe300_") and names[1].startswith("ids_")

    def boom(data):
        raise AssertionError("the cache was not used")

    monkeypatch.setattr(tokenize, "text_pieces", boom)  # training and encoding both need it
    again = bpe(corpus, cache)
    assert again.tokenizer.sha256 == first.tokenizer.sha256
    assert torch.equal(again.train_ids, first.train_ids)
    monkeypatch.undo()
    bpe(corpus, cache, vocab_size=280)  # other settings: another tokenizer
    assert len(list(cache.glob("bpe280_*.json"))) == 1


def test_damaged_cache_files_are_rebuilt(corpus, tmp_path):
    cache = tmp_path / "cache"
    first = bpe(corpus, cache)
    for path in cache.iterdir():
        path.write_bytes(b"garbage")
    again = bpe(corpus, cache)
    assert again.tokenizer.sha256 == first.tokenizer.sha256
    assert torch.equal(again.train_ids, first.train_ids)
    assert all(p.read_bytes() != b"garbage" for p in cache.iterdir())


def test_training_is_deterministic(corpus):
    a = TextTask(str(corpus), val_fraction=0.1, tokenizer="bpe", vocab_size=300)
    b = TextTask(str(corpus), val_fraction=0.1, tokenizer="bpe", vocab_size=300)
    assert a.tokenizer.sha256 == b.tokenizer.sha256


def test_saved_tokenizer_file_is_used(corpus, tmp_path):
    trained = bpe(corpus, tmp_path / "cache")
    saved = tmp_path / "tokenizer.json"
    trained.tokenizer.tokenizer.save(str(saved))
    task = TextTask(str(corpus), val_fraction=0.1, tokenizer="bpe", tokenizer_file=str(saved))
    assert task.tokenizer.sha256 == trained.tokenizer.sha256
    assert torch.equal(task.train_ids, trained.train_ids)


def word_level(tmp_path, normalizer=None, vocab=None):
    vocab = vocab or {"▁a": 0, "[UNK]": 1}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, "[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.normalizer = normalizer
    path = tmp_path / "word.json"
    tok.save(str(path))
    return path


def prefix_space_bpe(corpus, tmp_path):
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=True)
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([corpus.read_text(errors="ignore")], trainer=trainer)
    path = tmp_path / "prefix.json"
    tok.save(str(path))
    return path


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda c, t: word_level(t), r"is not a byte-level BPE \(token '▁a' is not in"),
        (lambda c, t: word_level(t, vocab={"a": 0, "[UNK]": 1}), "no token for the byte 0x00"),
        (lambda c, t: word_level(t, tokenizers.normalizers.Lowercase()), "has a normalizer"),
        (prefix_space_bpe, "does not reproduce the text byte for byte"),
        (lambda c, t: t / "missing.json", "task.tokenizer_file does not exist"),
        (lambda c, t: c, "cannot read task.tokenizer_file"),
    ],
)
def test_unusable_tokenizer_files_are_config_errors(corpus, tmp_path, make, message):
    path = make(corpus, tmp_path)
    with pytest.raises(ConfigError, match=message):
        TextTask(str(corpus), tokenizer="bpe", tokenizer_file=str(path))


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"tokenizer": "word"}, "unknown task.tokenizer 'word'; choose from byte, bpe"),
        ({"vocab_size": 300}, "apply to task.tokenizer=bpe only"),
        ({"tokenizer_file": "x.json"}, "apply to task.tokenizer=bpe only"),
        ({"tokenizer": "bpe", "vocab_size": 256}, r"task.vocab_size must be in \(256, "),
        (
            {"tokenizer": "bpe", "vocab_size": 300, "tokenizer_file": "x.json"},
            "cannot be set with task.tokenizer_file",
        ),
    ],
)
def test_bad_tokenizer_settings_are_config_errors(corpus, kw, message):
    with pytest.raises(ConfigError, match=message):
        TextTask(str(corpus), **kw)


def test_bpe_without_the_library_names_the_extra(corpus, monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import now raises ImportError
    with pytest.raises(ConfigError, match=r"pip install 'posx\[bpe\]'"):
        TextTask(str(corpus), tokenizer="bpe")


def test_byte_alphabet_is_gpt2s():
    alphabet = tokenize.byte_alphabet()
    assert sorted(alphabet) == sorted(tokenizers.pre_tokenizers.ByteLevel.alphabet())
    assert sorted(alphabet.values()) == list(range(256))
    assert alphabet["Ġ"] == ord(" ") and alphabet["a"] == ord("a")
