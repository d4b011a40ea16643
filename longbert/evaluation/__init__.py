"""Metrics, inference across processes, and `longbert evaluate`."""
