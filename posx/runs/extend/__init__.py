"""``posx extend RUN``: context extension by fine-tuning a run trained from scratch.

Modules: ``run`` (the parents, their checks, the launches:
:func:`~posx.runs.extend.run.run_extend`), ``methods`` (the ``extension=`` methods and which fit
a parent) and ``length`` (the length an extension trains and is evaluated at, from
``extend.factor``).
"""
