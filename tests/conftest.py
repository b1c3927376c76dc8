"""Hypothesis settings profiles shared by every test folder.

``default`` keeps a local run quick; ``ci`` (selected when the environment variable ``CI`` is
``true``) runs more examples and drops the per-example deadline, which shared CI machines miss.
``HYPOTHESIS_PROFILE`` overrides the choice.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("default", max_examples=100, deadline=None)
settings.register_profile(
    "ci",
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") == "true" else "default")
)
