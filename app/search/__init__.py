"""Hybrid search over the one index, `memory_chunks`: keyword, vector, and their fusion."""
