"""Chaos Mesh's API (`chaos-mesh.org/v1alpha1`) as clients and the simulator address it: one spelling of the
group, the kinds' plurals and the pause annotation for the faults that create experiments, the oracle that
reads them, the tools and the simulator that serves them; and how many of the matching pods a selector `mode`
picks, which the simulator acts on and the faults check before injecting."""

from __future__ import annotations

import math

GROUP, VERSION = "chaos-mesh.org", "v1alpha1"
PLURALS = {"PodChaos": "podchaos", "NetworkChaos": "networkchaos", "StressChaos": "stresschaos",
           "HTTPChaos": "httpchaos", "DNSChaos": "dnschaos", "IOChaos": "iochaos", "Schedule": "schedules"}
PAUSE_ANNOTATION = "experiment.chaos-mesh.org/pause"
MODES = ("one", "all", "fixed", "fixed-percent", "random-max-percent")


class ModeError(ValueError):
    """A `mode`/`value` pair Chaos Mesh refuses to select with (its message)."""


def mode_count(mode: str, value: object, matching: int, draw: float = 1.0) -> int:
    """How many of `matching` pods `mode` selects, as Chaos Mesh's FilterObjectsByMode
    (pkg/selector/generic/mode.go): `one` 1, `all` every one, `fixed` `value` (at most all), `fixed-percent`
    floor(matching × value / 100), `random-max-percent` floor(matching × p / 100) for a percentage p drawn from
    0..value (`draw` in [0, 1) picks it; Chaos Mesh draws at random). Raises ModeError with Chaos Mesh's
    message for a value it refuses; no matching pod selects none."""
    if matching == 0:
        return 0
    if mode == "one":
        return 1
    if mode == "all":
        return matching
    if mode not in MODES:
        raise ModeError(f"mode {mode} not supported")
    try:
        number = int(str(value))
    except ValueError:
        raise ModeError(f'strconv.Atoi: parsing "{value}": invalid syntax') from None
    if number == 0 or mode == "fixed" and number < 0:
        raise ModeError("cannot select any object as value below or equal 0")
    if mode == "fixed":
        return min(number, matching)
    if not 0 < number <= 100:
        raise ModeError(f"fixed percentage value of {number} is invalid, Must be "
                        f"{'(0,100]' if mode == 'fixed-percent' else '[0-100]'}")
    percent = number if mode == "fixed-percent" else min(number, int(draw * (number + 1)))
    return math.floor(matching * percent / 100)
