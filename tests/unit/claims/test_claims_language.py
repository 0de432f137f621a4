"""The claim language: statements parse into terms, comparisons and clauses by a small
grammar, and every bad claim is one line naming the file, the claim and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from posx.claims.files import load_claims
from posx.claims.find import claims_files
from posx.claims.language import ClaimError, Term, parse_statement

SHIPPED = sorted(claims_files([]).items())


def test_an_ordering_parses_into_a_chain():
    st = parse_statement("sinusoidal > rope > t5 >= alibi at 4x by bpb")
    assert [t.name for t in st.terms] == ["sinusoidal", "rope", "t5", "alibi"]
    assert st.ops == (">", ">", ">=")
    assert (st.factor, st.length, st.metric, st.task, st.mrr) == (4, None, "bpb", None, False)


@pytest.mark.parametrize(
    ("text", "terms", "ops"),
    [
        ("alibi ×r ≤ 1.02 at 8×", [Term("alibi", ratio=True), Term(number=1.02)], ("<=",)),
        ("alibi×r <= 1.02 at 8x", [Term("alibi", ratio=True), Term(number=1.02)], ("<=",)),
        ("alibi xr <= 1.02 at 8x", [Term("alibi", ratio=True), Term(number=1.02)], ("<=",)),
        ("nope ≥ rope at 2x by exact_match on copy", [Term("nope"), Term("rope")], (">=",)),
        ("0.5 < rope+yarnx4 at L=256", [Term(number=0.5), Term("rope+yarn×4")], ("<",)),
        ("xpos<xpos+ntk×2 at 2x", [Term("xpos"), Term("xpos+ntk×2")], ("<",)),
    ],
)
def test_terms_ratios_numbers_and_labels(text: str, terms: list[Term], ops: tuple):
    st = parse_statement(text)
    assert list(st.terms) == terms and st.ops == ops


def test_an_mrr_ranking_takes_no_length():
    st = parse_statement("mrr: nope > t5 > alibi > rope > sinusoidal")
    assert st.mrr and st.names == ["nope", "t5", "alibi", "rope", "sinusoidal"]
    assert st.factor is None and st.length is None


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("alibi at 4x", "at least two terms"),
        ("alibi > at 4x", "at least two terms"),
        ("1 < 2 at 4x", "at least one row label"),
        ("alibi > 1 < 2 at 4x", "both numbers"),
        ("alibi > rope", "say at which length"),
        ("alibi rope at 4x", "expected a comparison"),
        ("alibi == rope at 4x", "expected a comparison"),
        ("__import__('os') > rope at 4x", "neither a row label nor a number"),
        ("alibi > rope at 4y", "'at 4y'"),
        ("alibi > rope at 4x by", "'by' needs one value"),
        ("alibi > rope at 4x at 2x", "'at' given twice"),
        ("alibi > rope at 4x with care", "unexpected 'with'"),
        ("mrr: nope > t5 at 2x", "no 'at', 'on', '×r', '@' or margin"),
    ],
)
def test_a_bad_statement_is_one_line_naming_where_and_the_grammar(text: str, why: str):
    with pytest.raises(ClaimError) as err:
        parse_statement(text, "x.yaml: claim 'c'")
    message = str(err.value)
    assert "\n" not in message and why in message
    assert message.startswith("x.yaml: claim 'c': ") and "a statement is" in message


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("- a\n- b\n", "a mapping with keys paper, claims, note"),
        ("paper: P\nclaims: []\n", "non-empty list"),
        ("paper: P\nclaims: [{id: a, statement: 'a > b at 2x', extra: 1}]\n",
         "unknown key 'extra'"),
        ("paper: P\nclaims: [{statement: 'a > b at 2x'}]\n", "'id' must be a name"),
        ("paper: P\nclaims: [{id: a}]\n", "'statement' must be text"),
        ("paper: P\nclaims: [{id: a, statement: 'a > b'}]\n", "claim 'a': say at which length"),
        ("paper: P\nclaims: [{id: a, statement: 'a > b at 2x'}, {id: a, statement: 'a > b'}]\n",
         "used twice"),
        ("paper: P\nclaims: [{id: a, statement: 'a > b at 2x', published: {a: yes}}]\n",
         "must be a number or a list of numbers"),
        ("claims: [{id: a, statement: 'a > b at 2x'}]\n", "'paper' must name the paper"),
        ("paper: P\nclaims: [{id: a, statement: !!python/object:os.system x}]\n", "cannot read"),
        ("paper: [unclosed\n", "cannot read claims file"),
        ("paper: P\nwhat: 1\nclaims: [{id: a, statement: 'a > b at 2x'}]\n", "unknown key 'what'"),
    ],
)  # fmt: skip
def test_a_bad_claims_file_is_one_line_naming_the_file(tmp_path: Path, content: str, why: str):
    path = tmp_path / "mine.yaml"
    path.write_text(content)
    with pytest.raises(ClaimError) as err:
        load_claims(path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message and why in message


@pytest.mark.parametrize(("name", "path"), SHIPPED, ids=[n for n, _ in SHIPPED])
def test_every_shipped_claims_file_parses_and_has_its_preset(name: str, path: Path):
    claims = load_claims(path, name)
    assert claims.paper and claims.claims
    assert (path.parent.parent / "experiment" / f"{name}.yaml").is_file()
    preset = (path.parent.parent / "experiment" / f"{name}.yaml").read_text()
    assert f"experiment_name: {name}" in preset


def test_the_four_reproduced_papers_have_claims():
    assert {"alibi_table2", "nope_synthetic", "randomized_pe", "rope_scaling"} <= set(dict(SHIPPED))


def test_the_bpe_preset_makes_the_same_claims():
    files = dict(SHIPPED)
    bpe = load_claims(files["alibi_table2_bpe"])
    assert bpe.claims == load_claims(files["alibi_table2"]).claims


def _extension_labels(name: str, bases: set[str], root: Path) -> set[str]:
    """The labels ``posx extend`` gives each method of configs/extension/ applied to a run of
    the preset (posx.config.run_names.extension_label, with the preset's config as parent)."""
    from omegaconf import OmegaConf

    from posx.config.compose import CONFIG_DIR, compose
    from posx.config.run_names import extension_label
    from posx.runs.extend.length import launch_lengths

    parent = compose([f"experiment={name}"], hydra_node=True)
    (root / ".hydra").mkdir(parents=True)
    OmegaConf.save({k: v for k, v in parent.items() if k != "hydra"}, root / ".hydra/config.yaml")
    labels = set()
    for method in sorted(p.stem for p in (CONFIG_DIR / "extension").glob("*.yaml")):
        launch = [f"experiment={name}", f"extension={method}", f"extend.parent={root}"]
        lengths = launch_lengths(compose(launch, hydra_node=True), parent, set())
        cfg = compose([*launch, *lengths.settings()], hydra_node=True)  # as posx extend sets them
        positions = cfg.hydra.runtime.choices.get("positions", "default")
        for base in bases:
            cfg.extend.parent_label = base
            labels.add(extension_label(cfg, positions))
    return labels


@pytest.mark.parametrize(("name", "path"), SHIPPED, ids=[n for n, _ in SHIPPED])
def test_every_claim_names_rows_its_preset_makes(name: str, path: Path, tmp_path: Path):
    """The labels a preset's runs get: its swept encodings (with a non-default position
    strategy appended) and their eval-time variants (posx.config.variant_names.short_label);
    a swept config group other than those (an ``arm`` setting encoding and positions) counts
    with the encoding and positions each of its options picks; where the claims name
    extensions (``+ft@``), the labels ``posx extend`` gives the preset's runs."""
    import itertools

    from posx.config.compose import compose
    from posx.config.run_names import run_label
    from posx.config.variant_names import short_label

    cfg = compose([f"experiment={name}"], hydra_node=True)
    params = cfg.hydra.sweeper.params or {}
    split = lambda key, default: str(params.get(key, default)).split(",")  # noqa: E731
    groups = [
        k for k in params if k not in ("encoding", "positions") and (path.parents[1] / k).is_dir()
    ]
    labels: set[str] = set()
    for picks in itertools.product(*(split(k, None) for k in groups)):
        picked = [f"{k}={v}" for k, v in zip(groups, picks, strict=True)]
        arm = compose([f"experiment={name}", *picked], hydra_node=True) if picked else cfg
        encodings = split("encoding", arm.hydra.runtime.choices.encoding)
        positions = split("positions", arm.hydra.runtime.choices.get("positions", "default"))
        labels |= {run_label(e, p) for e in encodings for p in positions}
        for variant in arm.eval.variants:
            overrides = " ".join(sorted(str(o) for o in variant))
            labels |= {short_label(e, overrides) for e in encodings}
    claims = load_claims(path, name).claims
    if any("+ft@" in n for c in claims for n in c.statement.names):
        bases = {
            run_label(e, "default") for e in split("encoding", cfg.hydra.runtime.choices.encoding)
        }
        labels |= _extension_labels(name, bases, tmp_path / "parent")
    for claim in claims:
        assert set(claim.statement.names) <= labels, (claim.id, labels)


@pytest.mark.parametrize(
    ("text", "factor"), [("rope <= 0.1 at 1.5x", 1.5), ("rope <= 0.1 at 2x", 2.0)]
)
def test_a_factor_may_be_fractional(text: str, factor: float):
    statement = parse_statement(text)
    assert statement.factor == factor
    assert statement.where() == f"at {factor:g}x"


def test_a_factor_below_one_is_refused():
    with pytest.raises(ClaimError, match=r"at least 1 \(4x, 1.5x\)"):
        parse_statement("rope <= 0.1 at 0.5x")
