"""``posx extend RUN extension=longrope``: LongRoPE's factors searched on the parent before its
extension is launched.

The method's yaml asks for ``encoding.scaling.type: longrope`` without factors. Before the
launch, the parent's weights are scored under candidate factors (its model rebuilt from the
extension's config with ``encoding.scaling.factors`` set, the weights loaded again) on
``extend.longrope.windows`` training batches of the target length, drawn with their own seed
from the parent's task (its held-in data; the evaluation reads the task's held-out set). The
search (:mod:`posx.evaluation.longrope_search`) keeps its state in ``.longrope_search/`` of the
results root the extension is written under (never in the parent's directory), so an
interrupted one goes on when the same command is run again; the factors found become the
launch's override
``+encoding.scaling.factors=[...]``, so the extension's config holds them and the trainer never
asks which method it runs; with it, ``extend.longrope.searched=true`` records that they were
found here: an output of each replicate (each seed's parent finds its own), so the run's
identity holds the search's settings instead (:func:`posx.config.fingerprint.identity_config`).
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from posx.config.build import build_model, build_task, model_dims
from posx.config.keys import override_key
from posx.config.paths import options
from posx.config.validate import validate
from posx.errors import ConfigError
from posx.evaluation.longrope_search import Search, SearchSettings, start_factors
from posx.saved import SavedRun
from posx.training.losses import masked_loss

STATE_DIR = ".longrope_search"
GROUP = "extension"
FACTORS = "+encoding.scaling.factors"
# Set with the factors: they were found here, so the run's identity is the search's settings
# (each seed's parent finds its own factors), not the factors (posx/config/fingerprint.py).
SEARCHED = "extend.longrope.searched"


def searches(method: str, dirs: Sequence[Path]) -> bool:
    """Whether ``extension=METHOD``'s yaml asks for LongRoPE (its launch searches first)."""
    found = options(GROUP, dirs).get(method)
    if found is None:
        return False
    node = OmegaConf.load(found)
    return OmegaConf.select(node, "encoding.scaling.type", default=None) == "longrope"


def searched_keys(parent: DictConfig) -> set[str]:
    """The keys of the ``parent``'s overrides that are its own search's output (the factors and
    its record, when its launch searched them): no extension of it inherits them (its LongRoPE
    searches again at its own length; another method has no factors)."""
    if OmegaConf.select(parent, SEARCHED, default=False) is True:
        return {SEARCHED, override_key(FACTORS)}
    return set()


def wants_search(cfg: DictConfig) -> bool:
    """Whether ``cfg`` asks for LongRoPE without factors (the search must find them)."""
    scaling = OmegaConf.select(cfg, "encoding.scaling")
    return (
        isinstance(scaling, DictConfig)
        and scaling.get("type") == "longrope"
        and not scaling.get("factors")
    )


def _settings(cfg: DictConfig) -> tuple[SearchSettings, int]:
    node = OmegaConf.to_container(cfg.extend.longrope, resolve=True)
    windows = int(node.pop("windows"))
    node.pop("searched", None)  # a record of the launch, not a size of the search
    settings = SearchSettings(**node)
    settings.check()
    if windows < 1:
        raise ConfigError(f"extend.longrope.windows must be >= 1, got {windows}")
    return settings, windows


def _rotary(cfg: DictConfig) -> tuple[float, int]:
    """The RoPE base and rotary width the extension's encoding has."""
    enc = cfg.encoding
    rot = round(model_dims(cfg)["head_dim"] * float(enc.get("rotary_fraction", 1.0)))
    return float(enc.get("base", 10000.0)), int(rot)


def search_overrides(
    run: SavedRun,
    cfg: DictConfig,
    overrides: Sequence[str],
    dirs: Sequence[Path],
    say: Callable[[str], None],
) -> list[str]:
    """The overrides carrying the factors searched for the launch ``overrides`` of ``run``
    (``[]`` when its config ``cfg`` does not ask for a search).

    Raises:
        ConfigError: Search settings that cannot run.
    """
    if not wants_search(cfg):
        return []
    validate(cfg)  # what would refuse the launch refuses it before the search, not after
    settings, windows = _settings(cfg)
    base, rot = _rotary(cfg)
    scale = float(cfg.encoding.scaling.factor)
    original = int(model_dims(cfg)["train_length"])
    length = int(cfg.train.length)
    task = build_task(cfg)
    gen = torch.Generator().manual_seed(settings.seed + 1_000_003)
    batch = max(1, int(cfg.train.batch_size))
    data = [task.train_batch(batch, length, gen) for _ in range(windows)]

    def fitness(factors: Sequence[float]) -> float:
        # the launch's config with the candidate's factors, as the override below would set
        # them: composing it again per candidate cost more than scoring a tiny model
        made = copy.deepcopy(cfg)
        with open_dict(made):
            made.encoding.scaling.factors = [float(f) for f in factors]
        model = build_model(made, task.vocab_size)
        run.load_into(model)
        model.eval()
        with torch.inference_mode():
            loss = sum(float(masked_loss(model(b.inputs), b)) for b in data) / len(data)
        return math.exp(loss)

    starts = start_factors(base, rot, scale, original)
    _, sha = run.weights()
    name = f"{sha[:16]}_L{length}_s{scale:g}.json"
    state = Path(str(cfg.root)) / STATE_DIR / name  # the root the extension is written under
    state.parent.mkdir(parents=True, exist_ok=True)
    found = Search(fitness, starts, scale, settings, state, say).run()
    (state.with_suffix(".result.json")).write_text(
        json.dumps(
            {
                "factors": found.factors,
                "perplexity": found.fitness,
                "starts": found.starts,
                "evaluated": found.evaluated,
            }
        )  # fmt: skip
    )
    say(
        f"longrope: {run.name} at {length}: perplexity {found.fitness:.4f} on the search "
        f"batches (starts: {', '.join(f'{k} {v:.4f}' for k, v in found.starts.items())})"
    )
    return [f"{FACTORS}=[{','.join(map(repr, found.factors))}]", f"{SEARCHED}=true"]
