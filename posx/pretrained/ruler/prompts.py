"""RULER prompts in a pretrained model's tokens: the base template (the task's text and its
answer prefix, tokenized with the tokenizer's defaults, BOS first where it adds one) or, on
request, the tokenizer's chat template around the task's text with the answer prefix after the
assistant's turn begins; the samples of every task and length, searched to fit, from the cache
when it has them."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posx.errors import ConfigError
from posx.ruler import cache
from posx.ruler.build import Fitted, TooShort, build_samples
from posx.ruler.haystack import corpus_words
from posx.ruler.sample import Env
from posx.storage.atomic import atomic_write

log = logging.getLogger(__name__)
TEMPLATES = ("base", "chat")


class Prompter:
    """Turns a sample's text into the token ids the model reads.

    Args:
        tokenizer: A fast ``transformers`` tokenizer.
        template: ``base`` or ``chat``.
        name: The model, for messages.

    Raises:
        ConfigError: An unknown template, or ``chat`` for a tokenizer without one.
    """

    def __init__(self, tokenizer: Any, template: str, name: str) -> None:
        if template not in TEMPLATES:
            raise ConfigError(f"ruler.template={template!r}: choose base or chat")
        if template == "chat" and not getattr(tokenizer, "chat_template", None):
            raise ConfigError(
                f"ruler.template=chat: the tokenizer of {name} has no chat template; use "
                "ruler.template=base"
            )
        self.tokenizer, self.template, self.name = tokenizer, template, name

    def ids(self, text: str, prefix: str) -> list[int]:
        """The prompt's token ids: ``text`` then ``prefix``, in the chosen template."""
        if self.template == "base":
            return list(self.tokenizer(text + prefix, verbose=False)["input_ids"])
        turn = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
        found = self.tokenizer(turn + prefix, add_special_tokens=False, verbose=False)
        return list(found["input_ids"])

    def count(self, text: str, prefix: str) -> int:
        """Tokens of the prompt."""
        return len(self.ids(text, prefix))

    def check_encodes(self, task: str, fitted: Fitted) -> None:
        """Refuses a prompt the tokenizer turns (partly) into its unknown token.

        Raises:
            ConfigError: Naming the characters it cannot encode.
        """
        tok, unk = self.tokenizer, self.tokenizer.unk_token_id
        text = fitted.sample.input + fitted.sample.answer_prefix
        if unk is None or unk not in self.ids(fitted.sample.input, fitted.sample.answer_prefix):
            return
        bad = sorted(c for c in set(text) if unk in tok(c, add_special_tokens=False)["input_ids"])
        shown = " ".join(repr(c) for c in bad[:8]) + (" ..." if len(bad) > 8 else "")
        raise ConfigError(
            f"the tokenizer of {self.name} cannot encode the RULER prompt of {task}: "
            f"{shown or 'some text'} become {tok.unk_token}; use a corpus it can encode "
            "(task.corpus=...) or a model whose tokenizer has byte fallback"
        )


@dataclass
class Prepared:
    """Every (task, length)'s samples, and the cache files still to write.

    Attributes:
        samples: ``(task, length) -> samples``.
        pending: Cache files to write once everything was built (path -> text).
    """

    samples: dict[tuple[str, int], list[Fitted]] = field(default_factory=dict)
    pending: dict[Path, str] = field(default_factory=dict)

    def write_cache(self) -> None:
        """Writes the new cache files (after every check passed)."""
        for path, text in self.pending.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, text)
        self.pending.clear()


def prepare(
    prompter: Prompter,
    tasks: list[str],
    lengths: list[int],
    samples: int,
    seed: int,
    essay: str,
    identity: dict[str, Any],
    cache_dir: Path | None,
) -> Prepared:
    """The samples of every task at every length, read from the cache or built.

    Args:
        prompter: The model's prompts.
        tasks: Task names.
        lengths: Lengths in the model's tokens.
        samples: Samples per task and length.
        seed: The evaluation seed.
        essay: The corpus text (``essay`` haystacks).
        identity: What else identifies the samples (tokenizer's SHA-256, corpus, template).
        cache_dir: Where samples are kept (None: nowhere).

    Returns:
        The samples; nothing is written yet (:meth:`Prepared.write_cache`).

    Raises:
        ConfigError: A length shorter than a task's smallest prompt, or a prompt the tokenizer
            cannot encode.
    """
    out = Prepared()
    env = Env(0, prompter.count, corpus_words(essay))
    for name in tasks:
        for length in sorted(lengths):
            key = cache.cache_key({**identity, "task": name, "length": length, "seed": seed,
                                   "samples": samples})  # fmt: skip
            path = cache.cache_path(cache_dir, name, length, key) if cache_dir else None
            found = _cached(path, key, samples)
            if found is None:
                try:
                    found = build_samples(name, length, samples, seed, env)
                except TooShort as err:
                    raise ConfigError(str(err)) from err
                if path is not None:
                    out.pending[path] = cache.dump(key, found)
            if length == min(lengths):
                prompter.check_encodes(name, found[0])
            out.samples[(name, length)] = found
    return out


def _cached(path: Path | None, key: str, samples: int) -> list[Fitted] | None:
    if path is None or not path.is_file():
        return None
    try:
        return cache.load(path, key, samples)
    except (OSError, ValueError) as err:
        log.warning(f"posx: warning: {path} is damaged ({err}); building its samples again")
        return None
