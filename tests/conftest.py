"""Shared pytest configuration: hypothesis profiles.

Profiles (select with the environment variable ``HYPOTHESIS_PROFILE``, default ``ci``):

* ``ci``: ~25 examples per property, derandomized and without the example database: the
  README's test command and CI run the same examples every time, on every machine. A failure
  prints its reproduction blob.
* ``dev``: ~50 examples per property, random seeds: for exploring locally
  (``HYPOTHESIS_PROFILE=dev python -m pytest -q``); what it finds becomes a regression test.

Solve times vary with the instance and the machine, so no profile sets a deadline, and the
``too_slow`` health check (example generation plus a solve can exceed hypothesis' budget) is off.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_SUPPRESSED = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]

settings.register_profile(
    "dev",
    max_examples=50,
    deadline=None,
    suppress_health_check=_SUPPRESSED,
    print_blob=True,
)
settings.register_profile(
    "ci",
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,  # no examples replayed from earlier local runs: the same run everywhere
    suppress_health_check=_SUPPRESSED,
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
