"""Continuous learning outside the workflow code: the stream's state and records in the object store, the cycle's
data (window, validation, quarantine, rewards, replay), the schedule, and the production drill."""
