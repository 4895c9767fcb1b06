"""Alerts as a way in: the Alertmanager webhook receiver."""
