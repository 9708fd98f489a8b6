"""Store benchmark: batch append (Message objects and columns) and bulk read-to-Arrow, each as a
ratio to a raw reference measured in the same run.

    python tests/benchmarks/bench_store.py [--messages 200000] [--batch 256] [--repeat 3] [--dir /tmp]
        [--no-read | --no-append]

Append, two producer APIs, both into a fresh store per repeat (1 GiB commit-log files, 4 queues,
tags from 4 values, a distinct key per message, a distinct random body per message):

* ``put_messages``: a list of ``Message`` objects per batch (built before the clock starts).
* ``put_batch``: the columnar API (a list of bodies, the tags and keys as sequences).

Both encode every record (header, body CRC, UNIQ_KEY, properties), write it to the commit log and
dispatch the consume-queue units. Nothing is cached across repeats: each repeat opens a new store,
so every CRC and record is computed again.

Reference: the *same record bytes* (copied out of the store's commit log after a run) written with
``mmap`` slice assignment into a fresh pre-sized (1 GiB, like a commit-log file) mmap'd file, in the
same per-batch chunks: copying finished bytes, first-touch page faults included, nothing else. (The
store itself hands batches of 16 KiB and more to pwrite, which fills the page cache more cheaply
than faulting pages in through a mapping, and it also writes the consume-queue units.)

Timing: best of ``--repeat`` runs for every side, as wall time (perf_counter) and CPU time
(process_time: user + system of this process, which includes page-fault handling). The ratio is
reference time / store time, so 1.0 means "as fast as copying the finished bytes".

Read: ``MessageStore.read_range`` over every queue to Arrow RecordBatches (all columns) against a
raw scan copying the same commit-log bytes out of the mmap in 4 MiB chunks; best of ``--repeat`` after a warm-up,
wall and CPU time as for the appends (``--no-append`` skips the appends: the read's store is written anyway).
Data lives in a temporary directory that is removed at the end.
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rocketstream.store import Message, MessageStore, StoreConfig

QUEUES = 4
FILE_SIZE = 1 << 30
TAGS = ("TagA", "TagB", "TagC", "TagD")


class Timing:
    """Best (minimum) wall and CPU seconds over repeats."""

    def __init__(self) -> None:
        self.wall = float("inf")
        self.cpu = float("inf")

    def add(self, wall: float, cpu: float) -> None:
        self.wall = min(self.wall, wall)
        self.cpu = min(self.cpu, cpu)


def _inputs(n: int, body_size: int) -> tuple[list[bytes], list[str], list[str]]:
    blob = os.urandom(n * body_size)
    bodies = [blob[i * body_size:(i + 1) * body_size] for i in range(n)]
    return bodies, [TAGS[i % 4] for i in range(n)], [f"k{i}" for i in range(n)]


def _config(root: Path) -> StoreConfig:
    return StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=FILE_SIZE,
                       compress_msg_body_over=1 << 30)


def _run_store(root: Path, topic: str, n: int, batch: int, put: Callable[[MessageStore, int, int], object]
               ) -> tuple[float, float, list[int], bytes]:
    """One fresh store: (wall s, cpu s, bytes per batch, record bytes written)."""
    with MessageStore.open(root, config=_config(root)) as store:
        store.create_topic(topic, QUEUES)
        chunks = []
        c0, t0 = time.process_time(), time.perf_counter()
        for i in range(0, n, batch):
            result = put(store, i, (i // batch) % QUEUES)
            chunks.append(result.wrote_bytes)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert result.status.name == "PUT_OK", result.status
        written = store.commit_log_max_offset()
        data = bytes(store.commit_log.buffer_for(0)[1][:written])
    shutil.rmtree(root)
    return wall, cpu, chunks, data


def _raw_mmap_write(path: Path, data: bytes, chunks: list[int]) -> tuple[float, float]:
    """Write ``data`` in ``chunks`` into a fresh pre-sized mmap'd file: (wall s, cpu s)."""
    with open(path, "w+b") as f:
        f.truncate(FILE_SIZE)
        mm = mmap.mmap(f.fileno(), FILE_SIZE)
        view = memoryview(data)
        pos = 0
        c0, t0 = time.process_time(), time.perf_counter()
        for size in chunks:
            mm[pos:pos + size] = view[pos:pos + size]
            pos += size
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        mm.close()
    path.unlink()
    return wall, cpu


def bench_append(base: Path, n: int, body_size: int, batch: int, repeat: int) -> dict[str, Timing]:
    topic = f"Bench{body_size}"
    bodies, tags, keys = _inputs(n, body_size)
    msgs = [Message(topic=topic, body=b, tags=t, keys=k) for b, t, k in zip(bodies, tags, keys, strict=True)]
    apis = {
        "put_messages": lambda store, i, q: store.put_messages(msgs[i:i + batch], q),
        "put_batch": lambda store, i, q: store.put_batch(topic, q, bodies[i:i + batch], tags=tags[i:i + batch],
                                                         keys=keys[i:i + batch]),
    }
    timings = {name: Timing() for name in (*apis, "raw mmap")}
    for _ in range(repeat):
        for name, put in apis.items():
            wall, cpu, chunks, data = _run_store(base / f"store-{body_size}", topic, n, batch, put)
            timings[name].add(wall, cpu)
            timings["raw mmap"].add(*_raw_mmap_write(base / "raw-write", data, chunks))
    timings["bytes"] = len(data)
    return timings


def bench_read(root: Path, body_size: int, repeat: int = 3) -> tuple[Timing, int, int, Timing]:
    """Returns (read timing, rows, commit-log bytes, raw scan timing), each the best of ``repeat`` runs
    after one warm-up read (the first read in a process pays one-off imports of pyarrow.compute)."""
    topic = f"Bench{body_size}"
    with MessageStore.open(root, read_only=True) as store:
        lo, hi = store.commit_log_min_offset(), store.commit_log_max_offset()

    def once() -> int:
        # a fresh read-only open per run, as a Spark task does: new mappings, nothing cached
        rows = 0
        with MessageStore.open(root, read_only=True) as store:
            for q in store.queue_ids(topic):
                for rb in store.read_range(topic, q, store.min_offset(topic, q), store.max_offset(topic, q)):
                    rows += rb.num_rows
        return rows

    rows = once()
    best, best_raw = Timing(), Timing()
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        once()
        best.add(time.perf_counter() - t0, time.process_time() - c0)
        best_raw.add(*_raw_scan(root / "commitlog", lo, hi))
    return best, rows, hi - lo, best_raw


def _raw_scan(commitlog: Path, lo: int, hi: int) -> tuple[float, float]:
    """(wall s, cpu s) of copying the commit-log bytes [lo, hi) out of fresh mappings in 4 MiB chunks."""
    files = sorted(p for p in commitlog.iterdir() if p.name.isdigit())
    c0, t0 = time.process_time(), time.perf_counter()
    total = 0
    for p in files:
        with open(p, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            start = int(p.name)
            a, b = max(lo - start, 0), min(hi - start, len(mm))
            for pos in range(a, b, 4 << 20):
                total += len(mm[pos : min(pos + (4 << 20), b)])
            mm.close()
    return time.perf_counter() - t0, time.process_time() - c0


def _read_store(root: Path, n: int, body_size: int, batch: int) -> None:
    topic = f"Bench{body_size}"
    bodies, tags, keys = _inputs(n, body_size)
    with MessageStore.open(root, config=_config(root)) as store:
        store.create_topic(topic, QUEUES)
        for i in range(0, n, batch):
            store.put_batch(topic, (i // batch) % QUEUES, bodies[i:i + batch], tags=tags[i:i + batch],
                            keys=keys[i:i + batch])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000, help="messages at 256 B (1/8 of it at 4 KiB)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs per side")
    ap.add_argument("--no-read", action="store_true", help="skip the read-to-Arrow rows")
    ap.add_argument("--no-append", action="store_true", help="skip the append rows (the read's store is still written)")
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="rs-bench-", dir=args.dir))
    print(f"append: best of {args.repeat}; reference = the same record bytes written into a fresh pre-sized "
          f"1 GiB mmap'd file in the same per-batch chunks; ratio = reference time / store time")
    try:
        print(f"{'case':34} {'us/msg wall':>11} {'cpu':>7} {'ref wall':>9} {'cpu':>7} {'ratio wall':>10} "
              f"{'cpu':>6} {'MB/s':>7}")
        for body_size in (256, 4096):
            n = args.messages if body_size == 256 else max(args.messages // 8, 1000)
            if not args.no_append:
                t = bench_append(base, n, body_size, args.batch, args.repeat)
                raw = t["raw mmap"]
                for name in ("put_messages", "put_batch"):
                    s = t[name]
                    print(f"{f'append {body_size} B x{args.batch} {name}':34} {s.wall / n * 1e6:11.3f} "
                          f"{s.cpu / n * 1e6:7.3f} {raw.wall / n * 1e6:9.3f} {raw.cpu / n * 1e6:7.3f} "
                          f"{raw.wall / s.wall:10.2f} {raw.cpu / s.cpu:6.2f} {t['bytes'] / s.wall / 1e6:7.0f}")
            if args.no_read:
                continue
            root = base / f"read-{body_size}"
            _read_store(root, n, body_size, args.batch)
            r, rows, nbytes, raw = bench_read(root, body_size, args.repeat)
            mb, raw_mb = nbytes / r.wall / 1e6, nbytes / raw.wall / 1e6
            print(f"{'read to Arrow ' + str(body_size) + ' B':34} {r.wall / rows * 1e6:11.3f} "
                  f"{r.cpu / rows * 1e6:7.3f} {raw.wall / rows * 1e6:9.3f} {raw.cpu / rows * 1e6:7.3f} "
                  f"{raw.wall / r.wall:10.2f} {raw.cpu / r.cpu:6.2f} {mb:7.0f}  (raw {raw_mb:.0f} MB/s)")
            shutil.rmtree(root)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
