"""RULER's text tasks: the samples of the long-context suite, made and scored in pure Python.

Empty until issue 54 fills it; docs/architecture.md ("The long-context suite: where its parts
go") names its modules. It sits in the layer of :mod:`posx.tasks` and imports no torch, Hydra
or OmegaConf (import-linter contracts in pyproject.toml).
"""
