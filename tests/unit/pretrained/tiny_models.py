"""Tiny randomly initialised Hugging Face causal LMs and locally trained tokenizers, saved with
save_pretrained into a directory: the fixtures of the pretrained-model tests (no network)."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

TEXT = (
    "Les élèves étudient à l'école. Über den Fluß führt eine Brücke — naïve café, déjà vu.\n"
    "The quick brown fox jumps over the lazy dog; 12345 apples cost 6.78 euros (≈ 7€).\n"
    "def f(x):\n    return x * 2  # doubles\n"
) * 40


def corpus_file(directory: Path) -> Path:
    path = directory / "corpus.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def byte_level_tokenizer():
    """A GPT-2-style byte-level BPE trained on TEXT."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([TEXT], trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>"
    )


def sentencepiece_tokenizer():
    """A sentencepiece-style Unigram with Metaspace (``▁``) pre-tokenization and a BOS token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], unk_token="<unk>"
    )
    tok.train_from_iterator([TEXT], trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", bos)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


def save_model(kind: str, directory: Path, tokenizer=None, **config) -> Path:
    """Saves a tiny ``kind`` (llama, qwen2, mistral, gpt2) model and its tokenizer."""
    import transformers

    torch.manual_seed(0)
    tokenizer = tokenizer or byte_level_tokenizer()
    vocab = len(tokenizer)
    if kind == "gpt2":
        cfg = transformers.GPT2Config(
            vocab_size=vocab,
            n_positions=32,
            n_embd=32,
            n_layer=2,
            n_head=4,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            initializer_range=0.3,
            **config,
        )
    else:
        cls = {
            "llama": transformers.LlamaConfig,
            "qwen2": transformers.Qwen2Config,
            "mistral": transformers.MistralConfig,
        }[kind]
        cfg = cls(
            vocab_size=vocab,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=32,
            initializer_range=0.3,  # large weights: positions change the loss visibly
            **config,
        )
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def model_root(directory: Path, kinds: tuple[str, ...]) -> Path:
    """``directory`` holding a saved tiny model per kind (in a folder of its name) and the
    corpus file: what the CLI tests point ``posx eval hf:...`` at."""
    for kind in kinds:
        save_model(kind, directory / kind)
    corpus_file(directory)
    return directory


def offline_hub(monkeypatch, cache: Path) -> None:
    """No network and no real Hugging Face cache: ``cache`` stands for ``HF_HOME``."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(cache))
