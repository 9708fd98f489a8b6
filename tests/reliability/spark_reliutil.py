"""Shared pieces of the Spark reliability campaigns: stores, checkpoint reading, file-sink output.

Message bodies say which queue and sequence they belong to (``b"<queue>:<seq>:"`` + filler derived
from both, see :func:`spark_body`), so a reader tells a missing, duplicated, reordered or torn
message from the body alone.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

TOPIC = "RelSpark"


def spark_body(queue_id: int, seq: int) -> bytes:
    """Body of message ``seq`` of ``queue_id``: 8..~140 bytes, a few (1 in 211) over the 4 KiB
    compression threshold so compressed bodies are in every campaign."""
    head = b"%d:%d:" % (queue_id, seq)
    h = zlib.crc32(head)
    if h % 211 == 0:
        return head + b"c" * 5000
    return head + bytes([97 + h % 26]) * (h % 128)


def parse_body(data: bytes) -> tuple[int, int]:
    q, s, _ = data.split(b":", 2)
    return int(q), int(s)


def fill_simple(root: Path, n: int, *, topic: str = TOPIC, queues: int = 4) -> None:
    """``n`` messages round robin over ``queues`` queues (message i: queue i % queues, seq i // queues)."""
    from rocketstream.store import Message, MessageStore

    with MessageStore.open(root, create=True) as store:
        if topic not in store.topics():
            store.create_topic(topic, queues)
        for i in range(n):
            q, seq = i % queues, i // queues
            store.put_message(Message(topic, spark_body(q, seq), tags=f"t{seq % 3}"), queue_id=q)


def checkpoint_committed_offsets(checkpoint: Path, source: int = 0) -> dict | None:
    """End offsets of the last batch in ``commits/`` (the offsets/<N> line of source ``source``)."""
    commits = [int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()] \
        if (checkpoint / "commits").is_dir() else []
    if not commits:
        return None
    lines = (checkpoint / "offsets" / str(max(commits))).read_text().strip().splitlines()
    return json.loads(lines[2 + source])  # "v1", batch metadata, then one line per source


def file_sink_files(output: Path) -> list[Path]:
    """Data files the file sink committed, from its ``_spark_metadata`` log (files of a batch killed
    before its commit are on disk too but not in the log: readers must ignore them)."""
    log_dir = output / "_spark_metadata"
    if not log_dir.is_dir():
        return []
    entries = sorted((p for p in log_dir.iterdir() if p.name.split(".")[0].isdigit() and not p.name.startswith(".")),
                     key=lambda p: int(p.name.split(".")[0]))
    # a .compact file holds everything up to its batch; later files add to it
    compacts = [p for p in entries if p.name.endswith(".compact")]
    if compacts:
        last = compacts[-1]
        entries = [last] + [p for p in entries if int(p.name.split(".")[0]) > int(last.name.split(".")[0])]
    files: dict[str, None] = {}
    for p in entries:
        for line in p.read_text().splitlines()[1:]:
            if not line.strip():
                continue
            entry = json.loads(line)
            if entry.get("action", "add") == "add":
                files[entry["path"]] = None
            else:
                files.pop(entry["path"], None)
    return [Path(f.removeprefix("file://").removeprefix("file:")) for f in files]
