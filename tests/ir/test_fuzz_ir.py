"""Fuzzing in the default suite, with fixed seeds and small budgets (tests/ir/fuzzing.py states the property):
hypothesis mutates printed graphs and their attribute values, which must be refused with a braze error or
interpret like their reparse; and the maintainers' run (tests/ir/fuzz_ir.py) compiles mutants in worker
processes, so a crash in native code fails a test instead of ending pytest."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from braze.ir.printer import format_attrs

from .fuzzing import BASES, EDITS, SNIPPETS, TYPED_EDITS, VOCABULARY, check_mutant, fuzz_size_limit, mutate
from .test_parser_errors import WITH_ATTRS, attribute_values
from .test_printer_parser import sample_graph

ROOT = Path(__file__).resolve().parents[2]
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_where = st.floats(0, 1, exclude_max=True)
mutation = (st.tuples(st.sampled_from(EDITS), _where,
                      st.sampled_from(SNIPPETS) | st.sampled_from(VOCABULARY) | st.characters())
            | st.one_of(*(st.tuples(st.just(kind), _where, st.sampled_from(pieces))
                          for kind, (_, pieces) in sorted(TYPED_EDITS.items()))))
# Attribute values as the parser tests draw them, plus sizes that wrap 32 bits, pass the cap or wrap int64 products.
hostile_values = attribute_values | st.sampled_from([2 ** 31, 2 ** 32, 2 ** 40, 2 ** 62, (2 ** 31, 2 ** 31)])


@seed(11)
@FUZZ
@given(base=st.integers(0, len(BASES) - 1), edits=st.lists(mutation, min_size=1, max_size=3),
       input_seed=st.integers(0, 2 ** 16))
def test_mutated_text_is_refused_with_a_braze_error_or_interprets_like_its_reparse(
        base: int, edits: list[tuple[str, float, str]], input_seed: int) -> None:
    text, graph, arrays = BASES[base]
    with fuzz_size_limit():
        check_mutant(mutate(text, edits), graph, arrays, seed=input_seed)


@seed(12)
@FUZZ
@given(case=st.sampled_from(WITH_ATTRS), data=st.data())
def test_any_attribute_value_is_refused_with_a_braze_error_or_interprets_like_its_reparse(
        case: tuple[Any, Any], data: st.DataObject) -> None:
    graph = sample_graph(*case)
    node = graph.nodes[-1]
    attrs = dict(node.attrs)
    attrs[data.draw(st.sampled_from(sorted(attrs)), label="name")] = data.draw(hostile_values, label="value")
    text = str(graph).replace(f" {format_attrs(node.attrs)} :", f" {format_attrs(tuple(sorted(attrs.items())))} :")
    with fuzz_size_limit():
        check_mutant(text, graph, case[1])


def test_fuzz_run_compiles_mutants_like_the_interpreter_or_refuses_them(tmp_path: Path) -> None:
    child = subprocess.run([sys.executable, "-m", "tests.ir.fuzz_ir", "--budget", "400", "--seed", "0", "--compile",
                            "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    findings = {p.name: p.read_text(errors="replace")[-2000:] for p in tmp_path.glob("*-0-*")}
    assert child.returncode == 0 and not findings, (child.stdout, child.stderr, findings)
    summary = json.loads(child.stdout.strip().splitlines()[-1])
    outcomes = {k: v for k, v in summary.items() if k not in ("seed", "cases", "seconds")}
    assert sum(outcomes.values()) == summary["cases"] and outcomes["compiled"] >= 10, summary
