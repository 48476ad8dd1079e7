"""Benchmarks: `uv run python -m bench.<name>`."""
