"""A claim's terms measured on the runs: the report's cells (value, ``×r``, MRR) and the seed
values behind them, with the report's guards (not learned, at chance)."""

from __future__ import annotations

import math
import statistics
from itertools import product

import pandas as pd

from posx.claims.language import Statement, Term
from posx.claims.lineage import Pairing, pair_runs, seed_lineage
from posx.claims.verdict import COMPARE, Link, Measured, Verdict
from posx.errors import ConfigError
from posx.report.chance import LEARNED, cell_at_chance
from posx.report.rank import rank_table
from posx.report.tables import pivot, summarize


def _link(a: Term, op: str, b: Term, values: dict[str, Measured], paired: bool) -> Link:
    compare = COMPARE[op]

    def side(t: Term) -> tuple[float, dict[int, float] | None]:
        if t.name is None:
            return float(t.number or 0.0), None
        m = values[t.key]  # a margin (`B + 0.1`) moves the mean and every seed alike
        return m.mean + t.offset, {s: v + t.offset for s, v in m.seeds.items()}

    mean_a, seeds_a = side(a)
    mean_b, seeds_b = side(b)
    if seeds_a is None or seeds_b is None:  # one side is a number: each seed against it
        seeds = seeds_a if seeds_a is not None else seeds_b or {}
        pairs = [(v, mean_b) if seeds_a is not None else (mean_a, v) for v in seeds.values()]
    elif paired:
        pairs = [(seeds_a[s], seeds_b[s]) for s in sorted(set(seeds_a) & set(seeds_b))]
    else:  # related runs pair one to one (posx.claims.lineage); unrelated, every seed pair
        lined = pair_runs(seeds_a, values[a.key].lineage, seeds_b, values[b.key].lineage)
        if lined is not None:
            return _paired_link(Link(str(a), op, str(b), False, 0, 0, paired=True), lined)
        pairs = list(product(seeds_a.values(), seeds_b.values()))
    agree = sum(compare(x, y) for x, y in pairs)
    link = Link(str(a), op, str(b), compare(mean_a, mean_b), agree, len(pairs))
    return _with_spread(link, mean_a - mean_b, pairs)


def _with_spread(link: Link, margin: float, pairs: list[tuple[float, float]]) -> Link:
    """Sets how far the means are from the bound (``margin``, left minus right) and how far
    single comparisons scatter (the sample std of their differences: of each seed's value for
    a number, of the pair differences for related runs, of every seed pair's otherwise)."""
    link.margin = margin
    diffs = [x - y for x, y in pairs]
    link.spread = statistics.stdev(diffs) if len(diffs) > 1 else math.nan
    return link


def _paired_link(link: Link, lined: Pairing) -> Link:
    """A link between related runs, judged on their pairs: on the mean means the means over the
    paired runs (the same runs as the seed comparisons); where a run had no partner, the note
    says how the others were paired, how many were left out and the means compared."""
    compare = COMPARE[link.op]
    link.total = len(lined.pairs)
    link.agree = sum(compare(x, y) for x, y in lined.pairs)
    if not lined.pairs:
        link.note = f"{link}: related runs, none with a partner on the other side"
        return link
    left = sum(x for x, _ in lined.pairs) / len(lined.pairs)
    right = sum(y for _, y in lined.pairs) / len(lined.pairs)
    link.holds = compare(left, right)
    _with_spread(link, left - right, lined.pairs)
    if lined.unpaired:
        link.note = (
            f"{link}: {len(lined.pairs)} pair(s) of related runs ({lined.how}), "
            f"{lined.unpaired} run(s) without a partner left out; means over the pairs "
            f"{left:.3f} vs {right:.3f}"
        )
    return link


def links(st: Statement, values: dict[str, Measured], paired: bool) -> list[Link]:
    """The links ``A op B`` of a statement's chain, each with its mean and seed comparisons."""
    return [
        _link(a, op, b, values, paired)
        for a, op, b in zip(st.terms, st.ops, st.terms[1:], strict=False)
    ]


def _labels(frame: pd.DataFrame) -> str:
    return ", ".join(sorted(set(frame["variant"].astype(str)))) or "none"


def _task_rows(verdict: Verdict, frame: pd.DataFrame) -> pd.DataFrame | None:
    """The eval rows of the claim's task (``on TASK``, or the preset's only task); None, with
    the verdict's reason set, when there is no such task or several and none named."""
    st = verdict.claim.statement
    tasks = sorted(set(frame["task"].astype(str)))
    task = st.task or (tasks[0] if len(tasks) == 1 else None)
    if task is None or task not in tasks:
        verdict.reason = (
            f"no runs of task {task!r} (tasks: {', '.join(tasks)})"
            if task
            else f"runs of several tasks ({', '.join(tasks)}) and the claim names none: pass "
            f"--task {tasks[0]}"
        )
        return None
    return frame[frame["task"].astype(str) == task]


def _summaries(verdict: Verdict, rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """The report's summary of one task's rows (``tables.summarize``, the code behind every
    number ``posx report`` prints): per configuration, and per seed (``posx report --by seed``).

    A claim reads its values from these and nothing else, so it sees the report's numbers:
    exact match above chance where the task has a chance level, ×r of that, the margin of
    chance and the ``not learned`` mark. None, with the reason set, for a metric the rows do
    not record.
    """
    metric = verdict.claim.statement.metric or "auto"
    try:
        cells = summarize(rows, metric)
        seeds = summarize(rows, metric, by=("seed",))
    except ConfigError as err:
        verdict.reason = str(err)
        return None
    verdict.metric = "/".join(sorted(set(cells["metric"].astype(str))))
    return cells, seeds


def _at_length(verdict: Verdict, summary: pd.DataFrame, term: Term | None = None) -> pd.DataFrame:
    """The summary's cells at the claim's length (``at 4x``: each row's own training length
    times 4), or at the term's own (``NAME @1x``)."""
    own = term is not None and (term.factor is not None or term.length is not None)
    at = term if own else verdict.claim.statement
    target = at.factor * summary["train_length"] if at.factor is not None else at.length
    return summary[summary["eval_length"] == target]


def _not_learned(name: str, cells: pd.DataFrame) -> str:
    """Why a term the report marks ``not learned`` has no verdict, with its value at the
    training length."""
    home = cells[(cells["eval_length"] == cells["train_length"]) & (cells["n"] > 0)]
    value = f" ({home['metric'].iloc[0]} {home['mean'].iloc[0]:.3f})" if len(home) else ""
    return (
        f"{name} is not learned at its training length{value}, below the report's "
        f"--learned {LEARNED}: its values past it say nothing about extrapolation"
    )


def _measure(
    verdict: Verdict, term: Term, summaries: tuple[pd.DataFrame, pd.DataFrame], rows: pd.DataFrame
) -> None:
    """Adds one named term's report cell (its mean, or ×r) and per-seed cells (with each
    seed's run's lineage, from ``rows``) to the verdict, or sets the reason it has none (not
    run, failed, several configurations, not learned)."""
    cells, seeds = summaries
    where = verdict.claim.statement.where()
    if term.factor is not None or term.length is not None:
        where = "at " + (f"{term.factor:g}x" if term.factor is not None else f"L={term.length}")
    mine = cells[cells["variant"].astype(str) == term.name]
    here = _at_length(verdict, mine, term)
    ok = here[here["n"] > 0]
    if here.empty:
        verdict.reason = f"no rows of {term.name} {where} (labels: {_labels(cells)})"
        factor = term.factor if term.factor is not None else verdict.claim.statement.factor
        odd = sorted({int(n) for n in mine["train_length"] if factor and factor * n % 1})
        if odd and term.length is None:
            verdict.reason = (
                f"{term.name} {where}: {factor:g} x its training length "
                f"{', '.join(map(str, odd))} is not a whole length; train at a length it divides"
            )
    elif ok.empty:
        first = here.iloc[0]
        verdict.reason = f"{term.name} {where}: {first['status']} {first['reason']}"
    elif ok["fingerprint"].nunique() > 1:
        verdict.reason = (
            f"{term.name} has runs of {ok['fingerprint'].nunique()} configurations; "
            "keep one under the root"
        )
    elif not ok["learned"].all():
        verdict.reason = _not_learned(term.name, mine)
    if verdict.reason:
        return
    column = "ratio_mean" if term.ratio else "mean"
    fingerprint = ok["fingerprint"].iloc[0]
    own = seeds[(seeds["variant"].astype(str) == term.name) & (seeds["fingerprint"] == fingerprint)]
    left_out = _seeds_not_learned(term.name, own)
    mine = _at_length(verdict, own, term)
    per_seed = {
        int(s): float(v)
        for s, v in zip(mine["seed"], mine[column], strict=True)
        if not math.isnan(v) and int(s) not in left_out
    }
    mean = float(ok[column].iloc[0])
    if left_out and per_seed:  # the report's mean counts the seeds left out: the kept ones'
        mean = sum(per_seed.values()) / len(per_seed)
    if math.isnan(mean) or not per_seed:
        verdict.reason = f"{term} has no value at the training length to divide by"
        return
    verdict.notes += left_out.values()
    mine = rows[(rows["variant"].astype(str) == term.name) & (rows["fingerprint"] == fingerprint)]
    verdict.measured.append(Measured(term.key, per_seed, mean, seed_lineage(mine), left_out))


def _seeds_not_learned(name: str, own: pd.DataFrame) -> dict[int, str]:
    """Seed -> why it is left out, for the seeds of a row that learned on the mean but did not
    on their own (the report's ``k of n seeds not learned``, judged by the same rule on each
    seed's value at the training length)."""
    home = own[(own["eval_length"] == own["train_length"]) & (own["n"] > 0) & ~own["learned"]]
    return {
        int(rec.seed): (
            f"{name} seed {int(rec.seed)} left out: not learned at its training length "
            f"({rec.metric} {float(rec.mean):.3f}, below the report's --learned {LEARNED})"
        )
        for rec in home.itertuples()
    }


def measure_values(verdict: Verdict, frame: pd.DataFrame) -> None:
    """Fills the verdict's measured values for a claim at one length (not ``mrr:``): each
    term's cell of ``posx report``'s table, and its cell in each seed's."""
    st = verdict.claim.statement
    rows = _task_rows(verdict, frame)
    summaries = _summaries(verdict, rows) if rows is not None else None
    if summaries is None or rows is None:
        return
    cells, seeds = summaries
    lengths = sorted(set(_at_length(verdict, cells)["eval_length"]))
    verdict.where = f"{st.where()} (L={'/'.join(map(str, lengths))})" if lengths else st.where()
    measured: set[str] = set()
    for term in st.terms:
        if term.name is None or term.key in measured:
            continue  # `A <= B` and `A <= B + 0.1` read B once
        measured.add(term.key)
        _measure(verdict, term, summaries, rows)
        if verdict.reason:
            return
    _at_chance(verdict, _at_length(verdict, cells))


def _at_chance(verdict: Verdict, cells: pd.DataFrame) -> None:
    """Sets the reason when two or more terms are all at chance at the claim's length
    (:func:`cell_at_chance`, the report's rule): ``0 >= 0`` cannot tell them apart, as in a
    report column that carries no rank.

    A run that never learned its task is caught before, at its training length (the report's
    ``not learned`` mark, :func:`_measure`), so every term here learned it; one such term at
    chance at the claim's length compared with a number (``rope <= 0.1 at 2x``) is therefore a
    measurement, the papers' finding, and is judged like any other value."""
    names = verdict.claim.statement.names
    here = cells[cells["variant"].astype(str).isin(names) & (cells["n"] > 0)]
    if len(names) < 2 or here.empty:
        return
    for rec in here.itertuples():
        if not cell_at_chance(str(rec.metric), float(rec.mean), float(rec.margin)):
            return
    rule = f"{verdict.metric} within the report's margin of chance: 3/n or two standard errors"
    verdict.reason = (
        f"every term is at chance {verdict.where} ({rule}): the comparison cannot tell them apart"
    )


def _mrr(frame: pd.DataFrame, metric: str) -> dict[str, float]:
    tables = pivot(summarize(frame, metric))
    ranked = rank_table(tables, "ood")
    return dict(zip(ranked["variant"].astype(str), ranked["mrr"].astype(float), strict=True))


def measure_mrr(verdict: Verdict, frame: pd.DataFrame) -> None:
    """Fills the verdict's measured MRRs: the report's ranking of the seed means, and one
    ranking per seed (the runs of that seed alone)."""
    st = verdict.claim.statement
    verdict.metric = f"mrr of {st.metric or 'auto'}"
    verdict.where = f"past training, {frame['task'].nunique()} task(s)"
    means = _mrr(frame, st.metric or "auto")
    per_seed = {int(s): _mrr(part, st.metric or "auto") for s, part in frame.groupby("seed")}
    for name in st.names:
        if name not in means:
            verdict.reason = f"no runs of {name} (labels: {', '.join(sorted(means)) or 'none'})"
            return
        seeds = {s: r[name] for s, r in per_seed.items() if name in r and not math.isnan(r[name])}
        if math.isnan(means[name]) or not seeds:
            verdict.reason = (
                f"{name} has no MRR: ranked in no task (not learned, or every task at chance)"
            )
            return
        verdict.measured.append(Measured(name, seeds, means[name]))
