"""Golden IR tests: each tests/ir/passes/*.ir file is "# RUN: pass, pass {options}", the input IR, "# EXPECT:" and
the expected IR. The passes run through the manager (verifying after each); the printed result must equal the
expected text exactly (UPDATE_GOLDEN=1 rewrites the EXPECT blocks) and interpret like the input on random inputs."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from braze import ir
from braze.ir.passes import optimize

from .harness import EXPECT, GoldenCase, assert_equivalent, read_golden, weights_for

FILES = sorted(Path(__file__).parent.glob("*.ir"))


def load(path: Path) -> tuple[GoldenCase, ir.Graph]:
    """The file's case and its input graph carrying weights (side file or generated)."""
    case = read_golden(path)
    source = ir.parse(case.source)
    return case, source.replace(weights=weights_for(path, source))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_golden_pass_output(path: Path) -> None:
    case, source = load(path)
    result = optimize(source, case.passes, **case.options)
    if os.environ.get("UPDATE_GOLDEN") == "1" and str(result) != case.expected:
        path.write_text(case.source + EXPECT + str(result))
    else:
        assert str(result) == case.expected
    assert_equivalent(source, result, flags=case.options.get("flags"))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_golden_expected_text_round_trips(path: Path) -> None:
    expected = read_golden(path).expected
    assert str(ir.parse(expected)) == expected


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_golden_pass_output_is_deterministic(path: Path) -> None:
    case, source = load(path)
    assert str(optimize(source, case.passes, **case.options)) == str(optimize(source, case.passes, **case.options))
