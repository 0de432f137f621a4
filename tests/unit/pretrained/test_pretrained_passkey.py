"""Zero-shot passkey retrieval under teacher forcing: prompts fit their length, the key's
tokens are the scored ones, and the score is the model's own on those tokens."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from posx.pretrained.passkey import FILLER, build_prompt, evaluate_passkey, keys
from posx.pretrained.scaling import Variant
from tests.unit.pretrained.test_pretrained_eval import loaded


@pytest.mark.parametrize("name", ["llama", "llama_sp"])
def test_prompts_fit_their_length_and_end_with_the_key(tiny_dir, name):
    _, _, tok, _ = loaded(tiny_dir, name)
    unit = len(tok(FILLER, add_special_tokens=False)["input_ids"])
    for depth in (0.0, 0.5, 1.0):
        prompt = build_prompt(tok, 300, depth, "48213")
        assert prompt is not None and 300 - unit < len(prompt.ids) <= 300  # no room for more
        assert tok.decode(prompt.ids[prompt.answer]).strip() == "48213"
        assert prompt.answer[-1] == len(prompt.ids) - 1
        text = tok.decode(prompt.ids, skip_special_tokens=True)
        needle = text.index("The pass key is 48213")
        before = text[:needle].count(FILLER.strip())
        total = text.count(FILLER.strip())
        assert before == round(total * depth)
    assert build_prompt(tok, 10, 0.5, "48213") is None


def test_rows_score_the_key_tokens_under_teacher_forcing(tiny_dir):
    _, model, tok, _ = loaded(tiny_dir, "llama")
    rows = evaluate_passkey(model, tok, [200, 400], [Variant(), Variant("yarn", 4.0)], 32,
                            torch.device("cpu"), trials=2, depths=(0.0, 1.0), seed=3)  # fmt: skip
    assert [(r["eval_length"], r["status"]) for r in rows] == [(200, "ok"), (400, "ok")] * 2
    row = rows[0]
    assert {"exact_depth_0", "exact_depth_100", "loss_depth_0", "loss_depth_100"} <= set(row)
    # the same numbers by hand: each prompt's key tokens, their loss and argmax
    total, count, hits = 0.0, 0, 0
    for depth in (0.0, 1.0):
        for key in keys(2, 3 * 1_000_003 + 200):
            prompt = build_prompt(tok, 200, depth, key)
            labels = torch.full_like(prompt.ids, -100)
            labels[prompt.answer] = prompt.ids[prompt.answer]
            with torch.no_grad():
                out = model(input_ids=prompt.ids[None], labels=labels[None])
            n = len(prompt.answer)
            total, count = total + out.loss.item() * n, count + n
            pred = out.logits[0, torch.tensor(prompt.answer) - 1].argmax(-1)
            hits += bool((pred == prompt.ids[prompt.answer]).all())
            assert F.cross_entropy(out.logits[0, :-1], prompt.ids[1:]).isfinite()
    assert row["loss"] == pytest.approx(total / count, abs=1e-5)
    assert row["exact_match"] == hits / 4 and row["tokens"] == count
    assert rows[2]["loss"] != pytest.approx(row["loss"], abs=1e-4)  # yarn×4 changes it


def test_gpt2_prompts_past_its_table_are_unsupported(tiny_dir):
    _, model, tok, _ = loaded(tiny_dir, "gpt2")
    rows = evaluate_passkey(model, tok, [64], [Variant()], 32, torch.device("cpu"), trials=1)
    assert rows[0]["status"] == "unsupported" and "learned positions" in rows[0]["reason"]


def test_a_length_too_short_to_tell_the_depths_apart_is_unsupported(tiny_dir):
    """With no room for filler, depths 0, 50 and 100 scored one identical prompt three times
    and reported it as three depths."""
    _, model, tok, _ = loaded(tiny_dir, "llama")
    unit = len(tok(FILLER, add_special_tokens=False)["input_ids"])
    bare = next(n for n in range(8, 400) if build_prompt(tok, n, 0.0, "48213") is not None)
    tight, roomy = bare + unit // 2, bare + 3 * unit  # 0 filler sentences; 3 or more
    rows = evaluate_passkey(model, tok, [tight, roomy], [Variant()], 32, torch.device("cpu"),
                            trials=1, depths=(0.0, 0.5, 1.0))  # fmt: skip
    assert rows[0]["status"] == "unsupported", rows[0]
    assert (
        "too few to put the needle at depths 0%, 50%, 100% in different places"
        in (rows[0]["reason"])
    )
    assert rows[1]["status"] == "ok" and {"exact_depth_0", "exact_depth_50"} <= set(rows[1])
