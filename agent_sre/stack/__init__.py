"""The embedded dev stack: Temporal dev server, SeaweedFS S3 and the cluster simulator as local processes."""

from agent_sre.stack.errors import BinaryNotFoundError, ComponentStartError, PortInUseError, StackError
from agent_sre.stack.manager import (
                                     COMPONENTS,
                                     ComponentStatus,
                                     Outcome,
                                     bulk,
                                     disk_usage,
                                     down,
                                     running,
                                     select,
                                     status,
                                     up,
)

__all__ = [
    "COMPONENTS",
    "BinaryNotFoundError",
    "ComponentStartError",
    "ComponentStatus",
    "Outcome",
    "PortInUseError",
    "StackError",
    "bulk",
    "disk_usage",
    "down",
    "running",
    "select",
    "status",
    "up",
]
