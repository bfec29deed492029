"""Telemetry fixtures (the doubles live in telemetry_fakes.py)."""

from telemetry_fakes import fake_nvml, proc_root  # noqa: F401 - fixtures
