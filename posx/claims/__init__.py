"""Claims: every preset checks itself against the paper it reproduces.

``language`` parses a preset's claims file (configs/claims/NAME.yaml) with a small grammar;
``check`` measures each claim on the runs under a results root that record the preset
(``experiment_name``) and gives a verdict with a seed-level statistic; ``render`` shows the
verdicts (terminal, Markdown, the HTML report).
"""
