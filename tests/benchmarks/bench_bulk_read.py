"""Micro-benchmark: read_range_batches vs a raw scan of the same mapped commit-log bytes.

Not part of the test run. Writes a commit-log file of synthetic messages (in a temp directory unless
``--dir``), maps it, and times, in one process and one run:

* raw   — copy every record's bytes out of the mmap in ``batch_bytes`` chunks (numpy memcpy): the
          floor any reader that touches all bytes pays;
* bulk  — ``read_range_batches`` producing Arrow batches (full schema, and a body-only projection).
* pull  — network mode's decode of the same records: bodies of ``--per-pull`` records back to back (what a
          PULL_MESSAGE answer carries at RocketMQ's default transfer limits: 32 messages), packed into
          decode units by ``pack_pull_bodies`` and decoded by ``PullBodyDecoder.decode`` (the bodies are
          built before the clock starts; the packing's copy is timed, as the network read pays it).

Prints MB/s of stored record bytes and rows/s (per CPU second, best of --repeat runs), and
bulk/raw ratios. Use a log larger than the CPU caches (the default is ~90 MB). Example::

    /work/venv/bin/python tests/benchmarks/bench_bulk_read.py --messages 200000 --body 256
"""

from __future__ import annotations

import argparse
import mmap
import os
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

from rocketstream import codec
from rocketstream.codec import CQ_DTYPE, HostAddress, encode_record
from rocketstream.codec.arrow_records import BATCH_BYTES, PullBodyDecoder, pack_pull_bodies, project_schema
from rocketstream.store.read.bulk_read import read_range_batches


class MappedCommitLog:
    """One mapped commit-log file, the shape read_range_batches expects."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open(path, "rb")
        self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        self.buf = np.frombuffer(self._map, dtype=np.uint8)
        self.file_size = len(self.buf)

    def buffer_for(self, offset: int) -> tuple[int, np.ndarray]:
        return 0, self.buf

    def path_for(self, file_from: int) -> str:
        return str(self.path)


def write_log(path: Path, messages: int, body_size: int, queues: int) -> dict[int, np.ndarray]:
    """Records of `queues` interleaved queues (round robin); returns CQ units per queue."""
    born, store = HostAddress("10.0.0.7", 50123), HostAddress("10.0.0.1", 10911)
    units: dict[int, list[tuple[int, int, int]]] = {q: [] for q in range(queues)}
    body = os.urandom(body_size)
    pos = 0
    with open(path, "wb") as out:
        chunk = []
        for i in range(messages):
            q = i % queues
            tag = f"Tag{i % 3}"
            props = {"UNIQ_KEY": uuid.uuid4().hex.upper(), "WAIT": "true", "TAGS": tag, "KEYS": f"order-{i}"}
            raw = encode_record(topic="BenchTopic", queue_id=q, body=body, properties=props,
                                queue_offset=len(units[q]), physical_offset=pos, sys_flag=0,
                                born_timestamp=1_700_000_000_000 + i, born_host=born,
                                store_timestamp=1_700_000_000_100 + i, store_host=store)
            units[q].append((pos, len(raw), codec.tags_code(tag)))
            chunk.append(raw)
            pos += len(raw)
            if len(chunk) >= 10_000:
                out.write(b"".join(chunk))
                chunk = []
        out.write(b"".join(chunk))
        out.write(codec.encode_blank(8))
    return {q: np.array(u, dtype=CQ_DTYPE) for q, u in units.items()}


def best_of(repeat: int, fn) -> float:  # type: ignore[no-untyped-def]
    """Least CPU time of `repeat` runs: on a shared machine wall time mostly measures the neighbours."""
    times = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)


def raw_scan(log: MappedCommitLog, units: np.ndarray, batch_bytes: int) -> int:
    """Copy the same record bytes out of the map, batch by batch (contiguous runs per batch)."""
    offsets = units["offset"].astype(np.int64)
    sizes = units["size"].astype(np.int64)
    ends = offsets + sizes
    total = 0
    step = max(1, int(batch_bytes // max(1, sizes.mean())))
    for lo in range(0, len(offsets), step):
        hi = min(len(offsets), lo + step)
        chunk = np.array(log.buf[offsets[lo]:ends[hi - 1]])  # a real copy, like building a batch
        total += len(chunk)
    return total


def bulk(log: MappedCommitLog, units: np.ndarray, batch_bytes: int, columns: list[str] | None) -> int:
    rows = 0
    for batch in read_range_batches(log, units, 0, topic="BenchTopic", queue_id=0, broker_name="broker-a",
                                    columns=columns, batch_bytes=batch_bytes):
        rows += batch.num_rows
    return rows


def pull_bodies(log: MappedCommitLog, units: np.ndarray, per_pull: int) -> list[bytes]:
    """The records of ``units`` as PULL_MESSAGE bodies of ``per_pull`` records each (records back to back)."""
    offsets = units["offset"].astype(np.int64).tolist()
    sizes = units["size"].astype(np.int64).tolist()
    mv = memoryview(log.buf)
    return [b"".join(mv[o:o + s] for o, s in zip(offsets[i:i + per_pull], sizes[i:i + per_pull], strict=True))
            for i in range(0, len(offsets), per_pull)]


def pull_decode(bodies: list[bytes], columns: list[str] | None) -> int:
    decoder = PullBodyDecoder(project_schema(columns), "broker-a", None, False, "127.0.0.1:10911")
    rows = 0
    for unit in pack_pull_bodies(bodies):
        rows += decoder.decode(unit, "BenchTopic", 0, 0, 2**62).num_rows
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=400_000)
    ap.add_argument("--body", type=int, default=256, help="body bytes per message")
    ap.add_argument("--queues", type=int, default=2, help="interleaved queues in the log (reads queue 0)")
    ap.add_argument("--batch-bytes", type=int, default=BATCH_BYTES, help="bytes per batch (the readers' default)")
    ap.add_argument("--per-pull", type=int, default=32, help="records per pull body (RocketMQ's default limit)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "00000000000000000000"
        units = write_log(path, args.messages, args.body, args.queues)[0]
        log = MappedCommitLog(path)
        stored = int(units["size"].astype(np.int64).sum())
        rows = len(units)
        raw_s = best_of(args.repeat, lambda: raw_scan(log, units, args.batch_bytes))
        print(f"messages={args.messages} body={args.body}B queues={args.queues} rows read={rows} "
              f"stored={stored / 1e6:.1f} MB batch_bytes={args.batch_bytes}")
        print(f"{'path':<22}{'MB/s':>10}{'Mrows/s':>10}{'vs raw':>9}")
        print(f"{'raw mmap copy':<22}{stored / raw_s / 1e6:>10.0f}{rows / raw_s / 1e6:>10.2f}{1.0:>9.2f}")
        for label, columns in (("bulk full schema", None), ("bulk body only", ["body"]),
                               ("bulk no body/props", ["queueOffset", "commitLogOffset", "storeTimestamp"])):
            s = best_of(args.repeat, lambda: bulk(log, units, args.batch_bytes, columns))  # noqa: B023
            print(f"{label:<22}{stored / s / 1e6:>10.0f}{rows / s / 1e6:>10.2f}{raw_s / s:>9.2f}")
        bodies = pull_bodies(log, units, args.per_pull)
        for label, columns in (("pull full schema", None), ("pull body only", ["body"])):
            s = best_of(args.repeat, lambda: pull_decode(bodies, columns))  # noqa: B023
            print(f"{label:<22}{stored / s / 1e6:>10.0f}{rows / s / 1e6:>10.2f}{raw_s / s:>9.2f}")


if __name__ == "__main__":
    main()
