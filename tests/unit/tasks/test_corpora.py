"""``hf:`` corpora from datasets the tests build on disk (no network), and their errors."""

from __future__ import annotations

import json
import os
import sys

import pytest
import torch

from posx.errors import ConfigError
from posx.tasks.corpora import load_corpus, parse_hf
from posx.tasks.text import TextTask

ROWS = [" = Title = \n", "", "First line of text.", "Second, with café.\n"]
JOINED = " = Title = \n\nFirst line of text.\nSecond, with café.\n".encode()


@pytest.fixture
def datasets(monkeypatch, tmp_path):
    """The datasets library offline, its cache in tmp_path (load_dataset writes Arrow there)."""
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True, raising=False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_cache")
    load_corpus.cache_clear()
    yield datasets
    load_corpus.cache_clear()


def as_bytes(t: torch.Tensor) -> bytes:
    return t.numpy().tobytes()


def test_saved_dataset_rows_are_joined_with_newlines(datasets, tmp_path):
    datasets.Dataset.from_dict({"text": ROWS, "id": [1, 2, 3, 4]}).save_to_disk(tmp_path / "ds")
    assert as_bytes(load_corpus(f"hf:{tmp_path / 'ds'}", 10_000)) == JOINED
    assert as_bytes(load_corpus(f"hf:{tmp_path / 'ds'}", 20)) == JOINED[:20]


def test_saved_dataset_dict_split_and_val_corpus(datasets, tmp_path):
    splits = {
        "train": datasets.Dataset.from_dict({"text": ["train text " * 20]}),
        "validation": datasets.Dataset.from_dict({"text": ["held out text " * 5]}),
    }
    datasets.DatasetDict(splits).save_to_disk(tmp_path / "dd")
    root = tmp_path / "dd"
    task = TextTask(f"hf:{root}", val_corpus=f"hf:{root}::validation")
    assert as_bytes(task.train_data) == ("train text " * 20 + "\n").encode()
    assert as_bytes(task.val_data) == ("held out text " * 5 + "\n").encode()
    with pytest.raises(ConfigError, match="has no split 'test'; it has: train, validation"):
        load_corpus(f"hf:{root}::test", 1000)
    with pytest.raises(ConfigError, match="a dataset saved to disk has no CONFIG"):
        load_corpus(f"hf:{root}:cfg", 1000)


def test_data_files_directory_is_read_offline(datasets, tmp_path):
    folder = tmp_path / "jsonl"
    folder.mkdir()
    lines = [json.dumps({"content": r, "n": i}) for i, r in enumerate(ROWS)]
    (folder / "train.jsonl").write_text("\n".join(lines) + "\n")
    # No "text" column: the only string column is used.
    assert as_bytes(load_corpus(f"hf:{folder}", 10_000)) == JOINED


def test_two_string_columns_and_no_text_column_is_an_error(datasets, tmp_path):
    datasets.Dataset.from_dict({"a": ["x"], "b": ["y"]}).save_to_disk(tmp_path / "ds")
    with pytest.raises(ConfigError, match="needs a 'text' column or exactly one string column"):
        load_corpus(f"hf:{tmp_path / 'ds'}", 100)


def test_missing_dataset_offline_is_a_config_error(datasets, tmp_path):
    with pytest.raises(ConfigError, match="cannot load corpus 'hf:no-such-user/no-such-set'"):
        load_corpus("hf:no-such-user/no-such-set", 100)


@pytest.mark.parametrize("spec", ["hf:", "hf:a:b:c:d", "hf::cfg"])
def test_malformed_hf_spec_is_an_error(spec):
    with pytest.raises(ConfigError, match=r"is not hf:NAME\[:CONFIG\]\[:SPLIT\]"):
        parse_hf(spec)


def test_parse_hf_fields():
    assert parse_hf("hf:wikitext:wikitext-103-raw-v1:validation") == (
        "wikitext",
        "wikitext-103-raw-v1",
        "validation",
    )
    assert parse_hf("hf:/data/ds::test") == ("/data/ds", None, "test")
    assert parse_hf("hf:name") == ("name", None, None)


def test_without_datasets_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import now raises ImportError
    with pytest.raises(ConfigError, match=r"needs the datasets library: pip install 'posx\[hf\]'"):
        load_corpus("hf:wikitext:wikitext-103-raw-v1", 100)


def test_a_corpus_edited_within_the_process_is_read_again(tmp_path):
    """The bytes were kept by (path, size): a notebook that edited its corpus between
    posx.train and posx.evaluate had the change hidden from the data check."""
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"first text\n" * 10)
    assert as_bytes(load_corpus(str(path), 10_000)) == b"first text\n" * 10
    assert load_corpus(str(path), 10_000) is load_corpus(str(path), 10_000)  # kept while unchanged
    path.write_bytes(b"other text\n" * 10)  # the same size
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000))
    assert as_bytes(load_corpus(str(path), 10_000)) == b"other text\n" * 10
