"""Worker processes: thin wiring of workflows and activities onto task queues."""
