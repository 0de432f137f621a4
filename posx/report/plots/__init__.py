"""The plots of ``posx report``: matplotlib figures drawn from the report's tables.

Modules, from the report down: ``selection`` (which plots a report has, one colour per row
across them), ``operands`` (the operand-length heatmap of arithmetic runs), ``depths`` (RULER's
depth x length heatmap), ``positions`` (the per-position plot), ``figures`` (the length plot,
heatmap and training curves; the canvas and the files), ``style`` (colours, axes, titles,
legends) and ``data`` (what the plots draw, in the tables' terms). matplotlib is the optional
``plots`` extra, imported only when a figure is drawn.
"""
