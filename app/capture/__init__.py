"""Capture: sessions and observations, the hot path every interceptor calls."""
