from __future__ import annotations

import pytest

from tests.unit.pretrained.tiny_models import (
    corpus_file,
    save_model,
    sentencepiece_tokenizer,
)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """llama, qwen2 and gpt2 with a byte-level BPE, llama_sp with a Unigram/Metaspace one, and
    a corpus file: built once per session."""
    import torch

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("hf_models")
    for kind in ("llama", "qwen2", "gpt2"):
        save_model(kind, root / kind)
    save_model("llama", root / "llama_sp", sentencepiece_tokenizer())
    corpus_file(root)
    return root
