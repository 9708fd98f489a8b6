"""Crash-safe file replacement, shared by the store and the name server.

RocketMQ keeps this step in its common module (``MixAll.string2File``: write ``<file>.tmp``, keep the
previous content as ``<file>.bak``, rename), used by ``ConfigManager.persist`` (consumer offsets, topic
config) and the name server's ``KVConfigManager.persist`` alike. Here it sits below every layer, like
``rocketstream.errors``: it imports nothing of ours and raises plain ``OSError``; the store maps that to its
error tree (``store/files/durable.py``), the name server lets it through.

Every new file is fsynced before it is renamed over the old one, so a reader (or a restart after a crash)
finds the old content or the new, never a torn mix.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["fsync_dir", "write_atomic", "write_synced_tmp"]


def write_synced_tmp(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``<path>.tmp`` (created or truncated), fsync it, and return that path."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return tmp


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: ``<path>.tmp`` written and fsynced, then renamed into place."""
    os.replace(write_synced_tmp(path, data), path)


def fsync_dir(directory: Path) -> None:
    """fsync a directory, so that renames inside it survive a power loss."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
