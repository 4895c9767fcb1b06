from agent_sre.cli import app

app()
