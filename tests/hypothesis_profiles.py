"""How many examples hypothesis tries, chosen by the HYPOTHESIS_PROFILE
environment variable (tests/conftest.py loads it), as zarr's suite does.

Unset, hypothesis keeps its own choice: its ``default`` profile, or its ``ci``
profile where the CI variable is set. That is the full tier, the one CI and the
README's test command run. ``HYPOTHESIS_PROFILE=quick`` tries a tenth as many
examples, for the inner loop (README, "Development").

A test that wants more or fewer examples than the profile asks for them with
``examples(n)``: a bare ``max_examples=n`` in ``@settings`` would override
every profile, the quick one included.
"""

from __future__ import annotations

import os

from hypothesis import settings

PROFILE_VARIABLE = "HYPOTHESIS_PROFILE"
# hypothesis' own default; the counts given to examples() are meant at this one
FULL_EXAMPLES = 100

settings.register_profile("quick", max_examples=FULL_EXAMPLES // 10)


def load() -> None:
    """Load the profile HYPOTHESIS_PROFILE names, if it names one."""
    if name := os.environ.get(PROFILE_VARIABLE):
        settings.load_profile(name)


def examples(n: int) -> int:
    """n examples in the full tier, scaled by the loaded profile's count
    (30 of 300 under ``quick``); at least one."""
    return max(1, n * settings.default.max_examples // FULL_EXAMPLES)
