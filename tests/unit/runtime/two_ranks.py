"""One of two gloo processes for ``test_outcomes``: rank ``POSX_TEST_FAIL_RANK`` fails its part
of a sharded generation, then every rank answers a second, healthy one; each prints what it
saw (``RANK <r> <ErrorClass>: <message>`` and ``RANK <r> next <answers>``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import torch.distributed as dist

from posx.pretrained.ruler.generate import sharded
from posx.runtime.distributed import world


def echo(prompts: Sequence[Sequence[int]], budget: int) -> list[list[int]]:
    """Each prompt's first token, ``budget`` times."""
    return [[p[0]] * budget for p in prompts]


def failing(prompts: Sequence[Sequence[int]], budget: int) -> list[list[int]]:
    """``echo``, but out of memory on the rank the test names."""
    if os.environ["RANK"] == os.environ["POSX_TEST_FAIL_RANK"]:
        raise RuntimeError("CUDA out of memory (made by the test)\nsecond line")
    return echo(prompts, budget)


def main() -> None:
    dist.init_process_group("gloo")
    w = world()
    prompts = [[i] for i in range(5)]
    try:
        sharded(failing, w)(prompts, 2)
        print(f"RANK {w.rank} no error")
    except RuntimeError as err:
        print(f"RANK {w.rank} {type(err).__name__}: {err}".splitlines()[0])
    print(f"RANK {w.rank} next {sharded(echo, w)(prompts, 1)}")
    dist.destroy_process_group()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
