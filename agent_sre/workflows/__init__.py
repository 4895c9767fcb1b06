"""Temporal workflows: deterministic, short, reading like their state diagrams. I/O lives in activities."""
