"""Model rollouts: routing table, plans, analysis and rollback events; the workflow is
agent_sre.workflows.rollout."""
