"""One Hydra compose per distinct config within one launch.

Within a single ``@hydra.main`` call Hydra composes the same config more than once: once to
read ``hydra.mode``, again for the multirun itself, and each job of a sweep once when the
basic sweeper checks the batch (``validate_batch_is_legal``) and once more when the launcher
starts it. A compose costs 60-140 ms here, and a one-job sweep (every launch of
``posx extend``) spent four of them on two configs.

While :func:`composes_shared` is active, a compose whose inputs were composed before in the
same launch returns a copy of that result instead. The inputs are the arguments, the working
directory and the environment (Hydra records both); the config files are not re-read, which is
why the memo lives for one launch only. A compose is always made with Hydra's check of the
sweep overrides, so a later call that asks for the check gets a checked config; when the check
fails, the call that did not ask for it composes without it, as Hydra would.

A config is held until it is used once more (~180 kB each), and at most :data:`HELD` at a time:
a sweep of more jobs checks its batch before launching any, so only its last jobs' configs are
still held when the launcher comes to them; the others are composed again, as Hydra would.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import os
from collections.abc import Iterator
from typing import Any

from hydra._internal.config_loader_impl import ConfigLoaderImpl

HELD = 64  # configs held at a time

# Hydra 1.3's signature; another one is composed as Hydra does, without the memo
_PARAMETERS = (
    "self",
    "config_name",
    "overrides",
    "run_mode",
    "from_shell",
    "validate_sweep_overrides",
)


@contextlib.contextmanager
def composes_shared() -> Iterator[None]:
    """Within the block, Hydra composes each distinct config once (see the module docstring)."""
    original = ConfigLoaderImpl.load_configuration
    if tuple(inspect.signature(original).parameters) != _PARAMETERS:
        yield
        return
    memo: dict[tuple[Any, ...], tuple[ConfigLoaderImpl, Any]] = {}

    def load_configuration(
        self: ConfigLoaderImpl,
        config_name: str | None,
        overrides: list[str],
        run_mode: Any,
        from_shell: bool = True,
        validate_sweep_overrides: bool = True,
    ) -> Any:
        key = (id(self), config_name, tuple(overrides), run_mode, from_shell, os.getcwd(),
               tuple(sorted(os.environ.items())))  # fmt: skip
        if key in memo:
            return memo.pop(key)[1]  # its second use: nothing else asks for it
        try:
            cfg = original(self, config_name, overrides, run_mode, from_shell, True)
        except Exception:
            if validate_sweep_overrides:
                raise
            return original(self, config_name, overrides, run_mode, from_shell, False)
        memo[key] = (self, copy.deepcopy(cfg))  # the loader is kept, so its id names only it
        if len(memo) > HELD:
            del memo[next(iter(memo))]  # the oldest
        return cfg

    ConfigLoaderImpl.load_configuration = load_configuration  # type: ignore[method-assign]
    try:
        yield
    finally:
        ConfigLoaderImpl.load_configuration = original  # type: ignore[method-assign]
