"""Variable tracking (RULER's ``vt``): a chain of assignments ``VAR A = 12345``, ``VAR B = VAR
A``, ... hidden among lines of noise; the question asks for every variable that holds the
value.

One chain of four hops (five variables of five capital letters, a 5-digit value), as RULER's
default. The chain's first line sits at the depth asked for and the rest follow it in order at
drawn places. One worked example comes first (three-letter variables, its own value, its
answer given), sized to at most 500 tokens as RULER's is, or a quarter of the length when that
is shorter (RULER's 500 would not fit a prompt of 512 tokens at all). The wording and answer
prefix are RULER's.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass

from posx.ruler.fit import largest
from posx.ruler.haystack import NOISE
from posx.ruler.sample import DEPTHS, Env, Sample

TEMPLATE = (
    "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n"
    "{context}\nQuestion: Find all variables that are assigned the value {value} in the text "
    "above."
)
ANSWER_PREFIX = (
    " Answer: According to the chain(s) of variable assignment in the text above, {count} "
    "variables are assigned the value {value}, they are: "
)
EXAMPLE_TOKENS = 500


def _names(rng: random.Random, count: int, letters: int) -> list[str]:
    out: list[str] = []
    while len(out) < count:
        name = "".join(rng.choices(string.ascii_uppercase, k=letters))
        if name not in out:
            out.append(name)
    return out


@dataclass(frozen=True)
class VariableTracking:
    """RULER's ``vt``.

    Attributes:
        hops: Assignments after the first (variables = hops + 1).
        budget: Tokens the model may generate.
    """

    hops: int = 4
    budget: int = 30
    unit: str = "noise line"

    def smallest(self, length: int) -> int:
        """The fewest noise lines: one."""
        return 1

    def chain(
        self, rng: random.Random, size: int, depth: int, letters: int
    ) -> tuple[str, str, list[str]]:
        """The context (``size`` noise lines with the chain, its first line at ``depth``), the
        value, and the variables in order."""
        names = _names(rng, self.hops + 1, letters)
        value = str(rng.randint(10000, 99998))
        lines = [f"VAR {names[0]} = {value}"]
        lines += [f"VAR {names[j + 1]} = VAR {names[j]} " for j in range(self.hops)]
        first = int(size * depth / 100)
        places = [first, *sorted(rng.choice(range(first, size + 1)) for _ in range(self.hops))]
        units, start = [], 0
        for place, line in zip(places, lines, strict=True):
            units += [NOISE] * (place - start) + [line]
            start = place
        units += [NOISE] * (size - start)
        return "\n".join(units), value, names

    def make(self, rng: random.Random, size: int, depth: int | None, env: Env) -> Sample:
        """A prompt with ``size`` noise lines, after one worked example.

        Args:
            rng: The sample's generator (a fresh one of the same seed for every size tried).
            size: Noise lines.
            depth: Percent depth of the chain's first line.
            env: The length and token count (the example is sized in tokens).

        Returns:
            The sample.
        """
        example_seed = rng.getrandbits(64)
        first = depth if depth is not None else rng.choice(DEPTHS)
        context, value, names = self.chain(rng, size, first, 5)
        text = TEMPLATE.format(context=context, value=value)
        prefix = ANSWER_PREFIX.format(count=self.hops + 1, value=value)
        return Sample(
            input=self.example(example_seed, env) + "\n" + text,
            answer_prefix=prefix,
            outputs=tuple(names),
            depth=first,
            size=size,
            needle_depths=(first,),
        )

    def example(self, seed: int, env: Env) -> str:
        """The worked example (question, answer prefix and answer, then a newline), as many
        noise lines as fit in :data:`EXAMPLE_TOKENS` tokens (a quarter of a shorter length)."""

        def text(size: int) -> str:
            rng = random.Random(seed)
            context, value, names = self.chain(rng, size, rng.choice(DEPTHS), 3)
            prefix = ANSWER_PREFIX.format(count=self.hops + 1, value=value)
            return TEMPLATE.format(context=context, value=value) + prefix + " " + " ".join(names)

        room = min(EXAMPLE_TOKENS, env.length // 4)
        size = largest(lambda n: env.count(text(n), ""), room, 0, hint=4) or 0
        return text(size) + "\n"
