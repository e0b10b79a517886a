"""The budget of the reader fuzz tests: small and fixed in the default suite, larger for a maintainer's run
(BRAZE_READER_FUZZ_EXAMPLES=20000 pytest -q tests/frontend -k damaged); the sequence is derandomized, so a
failure repeats."""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

EXAMPLES_ENV = "BRAZE_READER_FUZZ_EXAMPLES"


def fuzz_settings(default: int) -> settings:
    """Hypothesis settings for `default` examples (or BRAZE_READER_FUZZ_EXAMPLES), fixed order, no deadline."""
    return settings(max_examples=int(os.environ.get(EXAMPLES_ENV, default)), deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
