"""Shared pieces of the Spark reliability campaigns: stores, checkpoint reading, file-sink output.

Message bodies say which queue and sequence they belong to (``b"<queue>:<seq>:"`` + filler derived
from both, see :func:`spark_body`), so a reader tells a missing, duplicated, reordered or torn
message from the body alone.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used, so importing this module stays light
    import subprocess

    import pyarrow as pa

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


def spawn_logged(script: str, *args: object, log: Path) -> subprocess.Popen:
    """Run ``tests/reliability/<script>`` in a fresh interpreter in its own process group (so SIGKILL
    to the group takes the Spark JVM and its Python workers too), output to ``log``."""
    import os
    import subprocess
    import sys

    here = Path(__file__).resolve().parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(here), os.environ.get("PYTHONPATH", "")]),
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    out = open(log, "ab")  # noqa: SIM115 - the child owns it
    try:
        return subprocess.Popen([sys.executable, str(here / script), *map(str, args)], stdout=out,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
    finally:
        out.close()


def read_sink(output: Path, columns: list[str]) -> pa.Table:
    """Every row the file sink committed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = [pq.read_table(f, columns=columns) for f in file_sink_files(output)]
    return pa.concat_tables(tables) if tables else None


def verify_rows(table, expected: dict[int, int], *, start: dict[int, int] | None = None) -> list[str]:
    """Problems with ``table`` (queueId, queueOffset, body) against queues holding offsets
    [start[q], expected[q]): duplicates, gaps, reordering, torn or wrong bodies. Empty = exactly once."""
    import numpy as np

    problems: list[str] = []
    start = start or {}
    if table is None:
        return [] if all(expected[q] <= start.get(q, 0) for q in expected) else ["no rows at all"]
    qids = table.column("queueId").to_numpy()
    offs = table.column("queueOffset").to_numpy()
    bodies = table.column("body").to_pylist()
    for q in sorted(set(qids.tolist()) | set(expected)):
        mask = qids == q
        got = np.sort(offs[mask])
        want = np.arange(start.get(q, 0), expected.get(q, 0))
        if len(got) != len(np.unique(got)):
            dup = got[:-1][got[1:] == got[:-1]]
            problems.append(f"queue {q}: {len(dup)} duplicated offsets, first {dup[:5].tolist()}")
        missing = np.setdiff1d(want, got)
        extra = np.setdiff1d(got, want)
        if len(missing):
            problems.append(f"queue {q}: {len(missing)} offsets missing, first {missing[:5].tolist()}")
        if len(extra):
            problems.append(f"queue {q}: {len(extra)} unexpected offsets, first {extra[:5].tolist()}")
    bad = 0
    for q, o, b in zip(qids.tolist(), offs.tolist(), bodies, strict=True):
        if b != spark_body(q, o):
            bad += 1
            if bad <= 3:
                problems.append(f"queue {q} offset {o}: torn or wrong body {b[:40]!r}")
    if bad > 3:
        problems.append(f"{bad} torn or wrong bodies in all")
    return problems


def store_max_offsets(root: Path, topic: str = TOPIC) -> dict[int, int]:
    from rocketstream.store import MessageStore

    with MessageStore.open(root, read_only=True) as store:
        return {q: store.max_offset(topic, q) for q in store.queue_ids(topic)}
