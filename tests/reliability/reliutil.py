"""Shared pieces of the reliability campaigns: self-describing message bodies, small-file stores,
child processes killed with SIGKILL, and a figures record each campaign prints and returns.

Every body says which queue and sequence number it belongs to (``b"<queue>:<seq>:"`` followed by
filler derived from both), so a reader can tell a missing, duplicated, reordered or torn message
from the body alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rocketstream.store import Message, MessageStore, StoreConfig

HERE = Path(__file__).resolve().parent
TOPIC = "Rel"
CL_SIZE = 64 * 1024          # small files: every campaign crosses many file boundaries
CQ_SIZE = 20 * 64


def body(queue_id: int, seq: int) -> bytes:
    """Deterministic body of message ``seq`` of ``queue_id`` (0..~600 bytes; a few are compressible
    and over the 4 KiB compression threshold)."""
    head = b"%d:%d:" % (queue_id, seq)
    h = zlib.crc32(head)
    if h % 97 == 0:
        return head + b"z" * 5000           # stored compressed by put_message
    return head + bytes([(h >> 3) & 0xFF]) * (h % 600)


def parse_body(data: bytes) -> tuple[int, int]:
    q, s, _ = data.split(b":", 2)
    return int(q), int(s)


def message(queue_id: int, seq: int, *, tags: bool = True) -> Message:
    return Message(TOPIC, body(queue_id, seq), tags=f"t{seq % 3}" if tags else None, keys=f"k{queue_id}-{seq}")


def concurrent_sizes(messages: int) -> dict[str, int]:
    """File sizes for the concurrent-read campaign (bigger files for the million-message run)."""
    big = messages > 100_000
    return {"mapped_file_size_commit_log": (8 << 20) if big else (1 << 20),
            "mapped_file_size_consume_queue": 20 * (1 << 16 if big else 1 << 12)}


def config(root: Path, **kw) -> StoreConfig:
    kw.setdefault("mapped_file_size_commit_log", CL_SIZE)
    kw.setdefault("mapped_file_size_consume_queue", CQ_SIZE)
    return StoreConfig(root, **kw)


def open_store(root: Path, **kw) -> MessageStore:
    return MessageStore.open(root, config=config(root, **kw))


def spawn(script: str, *args: object, stdout=subprocess.PIPE) -> subprocess.Popen:
    """Run ``tests/reliability/<script>`` in a fresh interpreter (the process a campaign kills)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, str(HERE / script), *map(str, args)], stdout=stdout,
                            stderr=subprocess.PIPE, env=env)


@dataclass
class Figures:
    """What a campaign reports: trials run, failures found, failures left (after fixes: 0)."""

    item: str
    trials: int = 0
    failures: list[str] = field(default_factory=list)
    extra: dict[str, object] = field(default_factory=dict)

    def fail(self, what: str) -> None:
        self.failures.append(what)

    def report(self) -> Figures:
        line = {"item": self.item, "trials": self.trials, "failures_found": len(self.failures), **self.extra}
        print("RELIABILITY " + json.dumps(line), flush=True)
        for f in self.failures[:20]:
            print("  FAILURE:", f, flush=True)
        return self

    def to_dict(self) -> dict:
        return asdict(self)
