"""The simulator's controllers, one module per controller as kube-controller-manager lays them out, each a
reconcile step over one pass's shared context (`context.Pass`); `workload.py` runs them in order."""
