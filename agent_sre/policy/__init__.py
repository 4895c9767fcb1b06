"""Policies: what decides the agent's next action. All speak one conversation format (`conversation.py`)."""
