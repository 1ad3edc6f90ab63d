"""Benchmarks of durably (outside the default test run): `uv run python -m bench MODE`."""
