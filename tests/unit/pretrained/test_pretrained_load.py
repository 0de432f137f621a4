"""Finding a pretrained model: what identifies it, where its trained context is read, and that
posx imports transformers only when a model is loaded."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from posx.errors import ConfigError
from posx.pretrained import load
from posx.pretrained.request import parse_values
from posx.pretrained.run import model_label, run_directory, trained_length


def test_a_directory_is_identified_by_a_hash_of_its_files(tiny_dir, tmp_path):
    import shutil

    first = load.find_model(f"hf:{tiny_dir / 'llama'}")
    assert first.revision.startswith("dir:") and first.weights == "safetensors"
    copy = shutil.copytree(tiny_dir / "llama", tmp_path / "copy")
    assert load.find_model(f"hf:{copy}").revision == first.revision  # same files, same hash
    (copy / "tokenizer.json").write_text((copy / "tokenizer.json").read_text() + " ")
    assert load.find_model(f"hf:{copy}").revision != first.revision


def test_trained_length_comes_from_the_config():
    cfg = SimpleNamespace(model_type="llama", max_position_embeddings=4096, rope_parameters=None)
    assert trained_length(cfg, None) == (4096, "max_position_embeddings")
    scaled = SimpleNamespace(
        model_type="llama",
        max_position_embeddings=131072,
        rope_parameters={"rope_type": "llama3", "original_max_position_embeddings": 8192},
    )
    assert trained_length(scaled, None) == (8192, "original_max_position_embeddings")
    assert trained_length(scaled, 2048) == (2048, "train_length=")
    with pytest.raises(ConfigError, match="train_length=N"):
        trained_length(SimpleNamespace(model_type="x", rope_parameters=None), None)


def test_labels_and_run_directories(tmp_path):
    assert model_label("meta-llama/Llama-3.2-1B", None) == "Llama-3.2-1B"
    assert model_label("/models/7b model/", None) == "m7b-model"
    assert model_label("x", "mine") == "mine"
    path = run_directory(tmp_path, "gpt2", "607a30d783dfa663caf39e06633721c8d4cfcd7e")
    assert path == tmp_path / "pretrained" / "gpt2_607a30d783df"


def test_settings_are_checked():
    values = parse_values(["eval.tokens=512", "passkey.depths=[0, 0.5]", "label=m"])
    assert values["eval.tokens"] == 512 and values["passkey.depths"] == [0, 0.5]
    with pytest.raises(ConfigError, match="positive integer"):
        parse_values(["eval.tokens=-1"])


def test_posx_imports_transformers_only_to_load_a_model():
    code = (
        "import sys, posx.cli, posx.pretrained.run, posx.pretrained.passkey\n"
        "assert 'transformers' not in sys.modules, 'imported at start'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_a_directory_is_hashed_once_and_again_when_a_file_changes(tmp_path, monkeypatch):
    """posx extend hf: names its run, then plans it: a model's files are read once, and a file
    that changed in between is read again (the revision names what was trained)."""
    import os

    from posx.pretrained import load

    (tmp_path / "a.bin").write_bytes(b"x" * 100)
    reads = []
    real = open

    def counting(file, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        reads.append(str(file))
        return real(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", counting)
    first = load.directory_hash(tmp_path)
    assert load.directory_hash(tmp_path) == first and len(reads) == 1
    (tmp_path / "a.bin").write_bytes(b"y" * 100)
    os.utime(tmp_path / "a.bin", ns=(1, 1))  # same size, another time
    assert load.directory_hash(tmp_path) != first and len(reads) == 2


def _weights_dir(path):
    path.mkdir()
    (path / "model.safetensors").write_bytes(b"w" * 1000)
    (path / "config.json").write_text("{}")
    return path


def test_a_later_process_takes_the_hash_from_the_cache_until_a_file_changes(tmp_path, monkeypatch):
    """Issue 57: --dry-run of a 7B model spent 12 s hashing weights the last run had read. A
    later process (lru cache cleared) finds the hash by the files' names, sizes and times."""
    import os

    from posx.pretrained import hash_cache

    monkeypatch.setenv(hash_cache.ENV_CACHE, str(tmp_path / "cache"))
    model = _weights_dir(tmp_path / "model")
    first = load.directory_hash(model)
    (entry,) = (tmp_path / "cache").glob("*.json")
    weights = model / "model.safetensors"
    stat = weights.stat()
    weights.write_bytes(b"v" * 1000)  # same size and time: taken as unchanged, not read
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    load._hash_files.cache_clear()
    assert load.directory_hash(model) == first
    os.utime(weights, ns=(1, 1))  # another time: read again, and the entry replaced
    load._hash_files.cache_clear()
    second = load.directory_hash(model)
    assert second != first and second in entry.read_text()


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("{not json", "damaged model-hash cache entry (Expecting property name"),
        ('{"sha256": "zz", "dir": "x", "files": []}', "'sha256' is not a hex SHA-256"),
        (
            '{"sha256": "' + "a" * 64 + '", "dir": "/elsewhere", "files": []}',
            "it is for '/elsewhere'",
        ),
        ("[1, 2]", "not a JSON object"),
    ],
)
def test_a_damaged_cache_entry_is_named_and_replaced(tmp_path, monkeypatch, text, said):
    from posx.errors import PosxWarning
    from posx.pretrained import hash_cache

    monkeypatch.setenv(hash_cache.ENV_CACHE, str(tmp_path / "cache"))
    model = _weights_dir(tmp_path / "model")
    first = load.directory_hash(model)
    (entry,) = (tmp_path / "cache").glob("*.json")
    entry.write_text(text)
    load._hash_files.cache_clear()
    with pytest.warns(PosxWarning) as caught:
        assert load.directory_hash(model) == first
    (line,) = [str(w.message) for w in caught]
    assert line.startswith(f"{entry}: ") and said in line, line
    assert first in entry.read_text()  # rewritten whole


def test_a_cache_that_cannot_be_written_is_skipped(tmp_path, monkeypatch):
    from posx.pretrained import hash_cache

    (tmp_path / "file").write_text("")
    monkeypatch.setenv(hash_cache.ENV_CACHE, str(tmp_path / "file" / "below"))
    model = _weights_dir(tmp_path / "model")
    assert len(load.directory_hash(model)) == 64
