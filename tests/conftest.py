"""Test-wide settings: hypothesis runs without per-example deadlines (CI shares 2 cores)."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("ci")
