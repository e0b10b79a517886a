"""Every behavioural sentence of the specification documents is quoted by a test in tests/spec.

The documents live beside the repository in shared/seeds (they are the specification braze was created from);
outside that layout this check cannot run and skips. A sentence counts as covered when one of its clauses of 30
characters or more appears in a tests/spec docstring.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

SPEC_TESTS = Path(__file__).parent
SEEDS = Path(os.environ.get("BRAZE_SPEC_DIR", SPEC_TESTS.parents[2] / "shared" / "seeds"))

# Not behaviour: signatures, code comments, cross-references, and a trait's own one-line method summaries.
NOT_BEHAVIOUR = re.compile(r"^(fn |pub |impl |//|See |Show \d+|Available on crate)|\{ \.\.\.$")
# Rationale rather than behaviour.
NOT_BEHAVIOUR_SENTENCES = {"A Module holds references and iterates dicts, none of which is hot; the hot part is the "
                           "tensor operators it calls, and those are already in C++."}


def _normalize(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("\u2019", "'").replace("\u2022", "")).strip()


def _sentences() -> list[tuple[str, str]]:
    out = []
    for doc in sorted(SEEDS.glob("0*.txt")):
        for paragraph in doc.read_text().split("\n"):
            for sentence in re.split(r"(?<=[.!?])\s+", paragraph):
                s = _normalize(sentence)
                if (len(s) >= 40 and s.endswith(".") and not NOT_BEHAVIOUR.search(s)
                        and s not in NOT_BEHAVIOUR_SENTENCES):
                    out.append((doc.name[:3], s))
    return list(dict.fromkeys(out))


def _covered(sentence: str, quoted: str) -> bool:
    if sentence in quoted:
        return True
    clauses = [c.strip(" .") for c in re.split(r"[;:,]|\band\b|\bbut\b", sentence)]
    return any(len(c) >= 30 and c in quoted for c in clauses)


@pytest.mark.skipif(not SEEDS.is_dir(), reason="the specification documents are not beside this checkout")
def test_every_specified_behaviour_is_quoted_by_a_test() -> None:
    quoted = _normalize(" ".join(p.read_text() for p in SPEC_TESTS.glob("test_*.py") if p.name != Path(__file__).name))
    missing = [f"{doc}: {s}" for doc, s in _sentences() if not _covered(s, quoted)]
    assert not missing, "sentences without a test:\n" + "\n".join(missing)
