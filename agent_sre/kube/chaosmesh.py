"""Chaos Mesh's API (`chaos-mesh.org/v1alpha1`) as clients and the simulator address it: one spelling of the
group, the kinds' plurals and the pause annotation for the faults that create experiments, the oracle that
reads them, the tools and the simulator that serves them."""

from __future__ import annotations

GROUP, VERSION = "chaos-mesh.org", "v1alpha1"
PLURALS = {"PodChaos": "podchaos", "NetworkChaos": "networkchaos", "StressChaos": "stresschaos",
           "HTTPChaos": "httpchaos", "Schedule": "schedules"}
PAUSE_ANNOTATION = "experiment.chaos-mesh.org/pause"
