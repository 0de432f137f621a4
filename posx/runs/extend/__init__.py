"""``posx extend RUN``: context extension by fine-tuning a run trained from scratch.

Modules: ``run`` (the launches: :func:`~posx.runs.extend.run.run_extend`), ``parent`` (the
parents a path holds and their checks), ``methods`` (the ``extension=`` methods and which fit
a parent) and ``length`` (the length an extension trains and is evaluated at, from
``extend.factor``).
"""
