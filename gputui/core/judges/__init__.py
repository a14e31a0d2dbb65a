"""Judges: pure functions (and small stateful wrappers for hysteresis) over History."""
