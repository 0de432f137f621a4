"""``posx`` with rank ``POSX_TEST_FAIL_RANK``'s RULER generation out of memory, for
``test_ruler_cli``'s torchrun test (a test's wrapper, not a posx option): run it as torchrun's
script with posx's arguments."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from posx.cli import main
from posx.pretrained.ruler import run
from posx.pretrained.ruler.generate import Generate

_greedy = run.greedy


def _failing_greedy(*args: Any, **kwargs: Any) -> Generate:
    def generate(prompts: Sequence[Sequence[int]], budget: int) -> list[list[int]]:
        if os.environ.get("RANK") == os.environ["POSX_TEST_FAIL_RANK"]:
            raise RuntimeError("CUDA out of memory (made by the test)")
        return _greedy(*args, **kwargs)(prompts, budget)

    return generate


if __name__ == "__main__":
    import sys

    import torch.distributed as dist

    run.greedy = _failing_greedy
    try:
        main()
    finally:  # a process still in its group when it exits can abort on the way out
        print(f"rank {os.environ.get('RANK')} in its process group at exit: "
              f"{dist.is_initialized()}", file=sys.stderr)  # fmt: skip
