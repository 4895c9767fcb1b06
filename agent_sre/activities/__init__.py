"""Temporal activities: plain typed functions that do the I/O for the workflows."""
