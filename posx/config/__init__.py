"""Configuration: compose a run's config, check it, build objects from it, and name the run.

:mod:`~posx.config.compose` (Hydra composition), :mod:`~posx.config.validate` (what the schema
cannot check), :mod:`~posx.config.hints` (what a bad key or override should have been),
:mod:`~posx.config.schema` (typed defaults), :mod:`~posx.config.paths` (where option yamls
live), :mod:`~posx.config.build` (config -> model, encoding, task, positions),
:mod:`~posx.config.trust` (which ``_target_`` may be built), :mod:`~posx.config.fingerprint`
(what identifies an experiment), :mod:`~posx.config.run_names` and
:mod:`~posx.config.variant_names` (how runs and eval-time variants are labelled) and
:mod:`~posx.config.saved` (a saved run's config, reloaded for eval).
"""
