"""RULER on pretrained models: prompts fit their length in the model's own tokens (a byte-level
BPE and a sentencepiece-style Unigram) to within one haystack unit; a model that reads the
answer from the prompt scores 100 on every task and one that says nothing 0; batched greedy
generation with a KV cache says what one prompt at a time says; samples come back from the
cache; a tokenizer that cannot encode a prompt is refused."""

from __future__ import annotations

import json
import logging
import random
import string

import pytest
import torch

from posx.errors import ConfigError
from posx.pretrained.ruler import prompts as prompts_module
from posx.pretrained.ruler.generate import end_ids, greedy
from posx.pretrained.ruler.prompts import Prompter, prepare
from posx.pretrained.ruler.suite import RulerSettings, evaluate_ruler
from posx.pretrained.scaling import Variant
from posx.ruler.build import sample_seed
from posx.ruler.registry import TASKS, task
from posx.ruler.sample import Env, depth_for
from posx.ruler.words import common_words
from tests.unit.pretrained.test_pretrained_eval import loaded
from tests.unit.pretrained.tiny_models import TEXT, corpus_file, save_model
from tests.unit.ruler.oracle import answer

CPU = torch.device("cpu")
ESSAY = TEXT * 3


def complete_sentencepiece():
    """A sentencepiece-style Unigram (Metaspace, BOS) whose alphabet holds every printable
    ASCII character, so RULER's prompts encode without its unknown token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=600, special_tokens=["<unk>", "<s>", "</s>"], unk_token="<unk>",
        initial_alphabet=list(string.printable.strip()) + ["▁"],
    )  # fmt: skip
    words = " ".join(random.Random(0).sample(common_words(), 2000))
    tok.train_from_iterator([TEXT, words, string.printable * 20], trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", bos)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


@pytest.fixture(scope="module")
def sp_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("ruler_sp")
    corpus_file(root)
    return save_model("llama", root / "llama", complete_sentencepiece())


def _model(tiny_dir, sp_dir, name):
    if name == "bpe":
        _, model, tok, _ = loaded(tiny_dir, "llama")
        return model, tok
    _, model, tok, _ = loaded(sp_dir.parent, "llama")
    return model, tok


def _prepare(tok, tasks, lengths, samples=2, cache_dir=None, seed=0):
    prompter = Prompter(tok, "base", "tiny")
    ready = prepare(prompter, tasks, lengths, samples, seed, ESSAY, {"tokenizer": "t"}, cache_dir)
    return prompter, ready


@pytest.mark.parametrize("kind", ["bpe", "sentencepiece"])
def test_prompts_fill_their_length_to_within_one_haystack_unit(tiny_dir, sp_dir, kind):
    _, tok = _model(tiny_dir, sp_dir, kind)
    lengths = [2100, 3000]
    prompter, ready = _prepare(tok, list(TASKS), lengths)
    for (name, length), fitted in ready.samples.items():
        t = task(name)
        for i, f in enumerate(fitted):
            ids = prompter.ids(f.sample.input, f.sample.answer_prefix)
            assert len(ids) == f.tokens and f.tokens + t.budget <= length, (name, length)
            env = Env(length, prompter.count, prompts_module.corpus_words(ESSAY))
            rng = random.Random(sample_seed(0, name, length, i))
            bigger = t.make(rng, f.sample.size + 1, depth_for(i, 2), env)
            assert prompter.count(bigger.input, bigger.answer_prefix) + t.budget > length, name
        if kind == "sentencepiece":
            assert ids[0] == tok.bos_token_id and tok.unk_token_id not in ids


def _oracle(tok):
    def run(prompts, budget):
        texts = [tok.decode(p, skip_special_tokens=True) for p in prompts]
        return [tok(answer(t), add_special_tokens=False)["input_ids"][:budget] for t in texts]

    return run


def _run(model, tok, ready, prompter, generate, tasks, variants=(Variant(),)):
    settings = RulerSettings(tasks=tasks, samples=2)
    return evaluate_ruler(model, prompter, ready, settings, list(variants), 32, CPU, generate)


def test_a_model_that_reads_the_prompt_scores_100_and_a_silent_one_0(tiny_dir):
    model, tok = _model(tiny_dir, None, "bpe")
    prompter, ready = _prepare(tok, list(TASKS), [2100], samples=3)
    rows, said = _run(model, tok, ready, prompter, _oracle(tok), list(TASKS),
                      [Variant(), Variant("yarn", 4.0)])  # fmt: skip
    scores = {(r["task"], r["overrides"]): r["score"] for r in rows}
    assert len(scores) == 2 * 12 and set(scores.values()) == {100.0}, scores
    assert all(r["samples"] == 3 and r["score_low"] < 100 == r["score_high"] for r in rows
               if r["task"] != "ruler/average")  # fmt: skip
    assert len(said) == 2 * 11 * 3 and all(s["score"] == 1.0 for s in said)
    # the average row records the threshold its effective length is read at (posx check)
    assert {r.get("threshold") for r in rows if r["task"] == "ruler/average"} == {85.6}
    for r in rows:  # per depth: the needle tasks' samples, all right
        name = r["task"].split("/")[1]
        if name.startswith("niah") or name == "vt":
            grid = json.loads(r["depth_grid"])
            assert sum(n for _, n in grid.values()) == 3 and all(t == n for t, n in grid.values())
            assert sorted(map(int, grid)) == [0, 33, 67]  # depths 0, 13 and 26 of RULER's 40
        else:
            assert "depth_grid" not in r
    rows, said = _run(model, tok, ready, prompter, lambda p, b: [[] for _ in p], list(TASKS))
    assert {r["score"] for r in rows} == {0.0} and all(r["empty"] == 3 for r in rows[:-1])
    assert all(s["prediction"] == "" for s in said)


def test_a_partial_answer_scores_its_share(tiny_dir):
    model, tok = _model(tiny_dir, None, "bpe")
    prompter, ready = _prepare(tok, ["niah_multivalue"], [2100], samples=2)

    def half(prompts, budget):  # two of the four values
        texts = [answer(tok.decode(p, skip_special_tokens=True)).split()[:2] for p in prompts]
        return [tok(" ".join(t), add_special_tokens=False)["input_ids"] for t in texts]

    rows, _ = _run(model, tok, ready, prompter, half, ["niah_multivalue"])
    assert rows[0]["score"] == 50.0 and rows[0]["exact_match"] == 0.0


@pytest.mark.parametrize("name", ["llama", "gpt2"])  # gpt2: absolute positions tell padding
def test_batched_greedy_generation_says_what_one_prompt_at_a_time_says(tiny_dir, name):
    _, model, tok, _ = loaded(tiny_dir, name)
    texts = ["The quick brown fox", "def f(x):\n    return x", "Les élèves"]
    ids = [tok(t)["input_ids"] for t in texts]
    assert max(map(len, ids)) + 12 <= 32  # gpt2's table
    together = greedy(model, tok, CPU, batch_tokens=10_000)(ids, 12)
    alone = greedy(model, tok, CPU, batch_tokens=1)(ids, 12)
    assert together == alone
    for prompt, new in zip(ids, alone, strict=True):  # each the model's own greedy choice
        seq = list(prompt)
        for _ in range(min(len(new) + 1, 12)):
            with torch.no_grad():
                seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
        own = seq[len(prompt) :]
        assert own[: len(new)] == new
        assert len(new) == 12 or own[len(new)] in end_ids(model, tok)  # stopped at an end


def test_samples_come_back_from_the_cache_and_a_damaged_file_is_rebuilt(
    tiny_dir, tmp_path, monkeypatch, caplog
):
    _, tok = _model(tiny_dir, None, "bpe")
    _, first = _prepare(tok, ["niah_single_1", "vt"], [2100], cache_dir=tmp_path)
    assert not list(tmp_path.iterdir())  # nothing written until asked
    first.write_cache()
    files = sorted(tmp_path.iterdir())
    assert len(files) == 2

    def no_build(*args, **kwargs):
        raise AssertionError("built again")

    monkeypatch.setattr(prompts_module, "build_samples", no_build)
    _, again = _prepare(tok, ["niah_single_1", "vt"], [2100], cache_dir=tmp_path)
    assert again.samples == first.samples and not again.pending
    files[0].write_text('{"version": 1, "key": "x"')
    monkeypatch.undo()
    with caplog.at_level(logging.WARNING):
        _, rebuilt = _prepare(tok, ["niah_single_1", "vt"], [2100], cache_dir=tmp_path)
    assert f"{files[0]} is damaged" in caplog.text
    assert rebuilt.samples == first.samples and list(rebuilt.pending) == [files[0]]
    _, other_seed = _prepare(tok, ["niah_single_1"], [2100], cache_dir=tmp_path, seed=1)
    assert other_seed.pending  # another seed is another key


def test_a_tokenizer_that_cannot_encode_the_prompt_is_refused(tiny_dir):
    _, _, tok, _ = loaded(tiny_dir, "llama_sp")  # trained on text without 0 or 9
    with pytest.raises(
        ConfigError, match=r"cannot encode the RULER prompt of niah_single_1: .*'0'.* become <unk>"
    ):
        _prepare(tok, ["niah_single_1"], [4000])


def test_a_chat_template_is_asked_of_a_tokenizer_that_has_one(tiny_dir):
    _, _, tok, _ = loaded(tiny_dir, "llama")
    with pytest.raises(ConfigError, match="has no chat template; use ruler.template=base"):
        Prompter(tok, "chat", "tiny")
    tok.chat_template = "{% for m in messages %}<user>{{ m['content'] }}</user>{% endfor %}<bot>"
    ids = Prompter(tok, "chat", "tiny").ids("Hello", " Answer:")
    assert tok.decode(ids) == "<user>Hello</user><bot> Answer:"


def test_what_the_model_said_is_kept_readable_in_one_csv_cell():
    from posx.pretrained.ruler.suite import shown

    assert shown("a\rb\x00c\nd\te\u2028") == "a\\rb\\u0000c\nd\te\\u2028"


def test_lengths_past_a_learned_position_table_are_unsupported_rows(tiny_dir):
    _, model, tok, _ = loaded(tiny_dir, "gpt2")  # 32 learned positions
    prompter, ready = _prepare(tok, ["niah_single_1"], [2100])

    def never(prompts, budget):
        raise AssertionError("generated past the table")

    rows, said = _run(model, tok, ready, prompter, never, ["niah_single_1"],
                      [Variant(), Variant("yarn", 2.0)])  # fmt: skip
    assert [r["status"] for r in rows] == ["unsupported"] * 4 and not said
    assert "learned positions for 32 tokens only" in rows[0]["reason"]
    assert "no rotary positions to scale" in rows[2]["reason"]
    assert rows[1]["task"] == "ruler/average" and "ruler/niah_single_1:" in rows[1]["reason"]
