"""Pydantic contracts: every message that crosses a process, activity or storage boundary lives here."""
