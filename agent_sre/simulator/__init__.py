"""A simulated Kubernetes cluster that speaks the Kubernetes REST API (see docs/architecture.md)."""
