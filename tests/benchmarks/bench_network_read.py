"""CPU per message of Spark's network read path without Spark: the executor side (``NetworkBrokerView.read_ranges``
to Arrow batches of all 21 columns, in this process) and our broker (``rocketstream serve``, its process's CPU
from /proc), against the local read of the same store files (``MessageStore.read_range``), in one run.

    python tests/benchmarks/bench_network_read.py [--messages 200000] [--sizes 256,1024,4096]
        [--limits default,raised] [--repeat 3] [--dir DIR]

CPU time (user+sys) is counted instead of wall time: on a shared 2-core machine it is the steadier measure
(wall time is printed too); "(loop)" is the part of the executor's CPU spent on its client loop thread
(requests and answers), the rest is the decoding thread's. The store is written as bench_spark.py writes it
(4 queues, batches of 256); "default"/"raised" are RocketMQ's transfer limits of getMessage as in
bench_spark.py (RAISED_CONF). Best of ``--repeat`` after one warm-up. ratio = local CPU / (network read CPU +
broker CPU): the share of the local read's cost that the network read costs the machine, 1.0 = as cheap.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.benchmarks.bench_spark import QUEUES, RAISED_CONF, TOPIC, produce, serve_ours  # noqa: E402


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def local_cpu(root: Path, repeat: int) -> tuple[float, float, int]:
    from rocketstream.store import MessageStore

    best_cpu = best_wall = float("inf")
    n = 0
    with MessageStore.open(root, read_only=True) as store:
        for i in range(repeat + 1):
            c0, t0, n = time.process_time(), time.perf_counter(), 0
            for q in range(QUEUES):
                for batch in store.read_range(TOPIC, q, 0, store.max_offset(TOPIC, q)):
                    n += batch.num_rows
            if i:
                best_cpu = min(best_cpu, time.process_time() - c0)
                best_wall = min(best_wall, time.perf_counter() - t0)
    return best_cpu, best_wall, n


async def _thread_cpu() -> float:
    """CPU time of the thread running this coroutine (the client loop's)."""
    return time.thread_time()


def network_cpu(root: Path, home: Path, extra: dict[str, str],
                repeat: int) -> tuple[float, float, float, float, int]:
    from rocketstream.spark.network.view import resolve_network_brokers
    from rocketstream.store import MESSAGE_SCHEMA

    served = serve_ours(root, home, extra)
    try:
        (location,) = resolve_network_brokers(served.namesrv_addr, [TOPIC], "BenchNetworkRead")
        view = location.open()
        bounds = view.queue_bounds(TOPIC, list(range(QUEUES)))
        ranges = [(TOPIC, q, 0, bounds[q].max) for q in range(QUEUES)]
        pid = served.procs[0].pid
        client = view._client
        best = (float("inf"), float("inf"), float("inf"), float("inf"))
        n = 0
        for i in range(repeat + 1):
            l0 = client.run(_thread_cpu())
            s0, c0, t0, n = proc_cpu(pid), time.process_time(), time.perf_counter(), 0
            for batch in view.read_ranges(ranges, columns=MESSAGE_SCHEMA.names, tags=None, check_crc=False,
                                          fail_on_data_loss=True):
                n += batch.num_rows
            run = (time.process_time() - c0, proc_cpu(pid) - s0, time.perf_counter() - t0,
                   client.run(_thread_cpu()) - l0)
            if i and run[0] + run[1] < best[0] + best[1]:
                best = run
        return best[0], best[1], best[2], best[3], n
    finally:
        served.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--sizes", default="256,1024,4096")
    ap.add_argument("--limits", default="default,raised")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="rs-net-read-", dir=args.dir))
    rows = []
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            root = base / f"store-{size}"
            produce(root, args.messages, size)
            l_cpu, l_wall, n = local_cpu(root, args.repeat)
            assert n == args.messages, n
            for limits in args.limits.split(","):
                extra = dict(RAISED_CONF) if limits == "raised" else {}
                c_cpu, b_cpu, wall, loop_cpu, n = network_cpu(root, base / f"home-{size}-{limits}", extra,
                                                              args.repeat)
                assert n == args.messages, n
                rows.append((size, limits, l_cpu, l_wall, c_cpu, loop_cpu, b_cpu, wall))
                print(f"[{size} B, {limits}] done", flush=True)
            shutil.rmtree(root)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    m = args.messages / 1e6
    print(f"\nCPU µs per message, {args.messages:,} messages of 4 queues, all 21 columns, best of {args.repeat}")
    print(f"{'body':>6} {'limits':>8} {'local':>7} {'net read':>9} {'(loop)':>7} {'broker':>7} {'net total':>10} "
          f"{'ratio':>6} {'local wall s':>13} {'net wall s':>11}")
    for size, limits, l_cpu, l_wall, c_cpu, loop_cpu, b_cpu, wall in rows:
        print(f"{size:>6} {limits:>8} {l_cpu / m:7.2f} {c_cpu / m:9.2f} {loop_cpu / m:7.2f} {b_cpu / m:7.2f} "
              f"{(c_cpu + b_cpu) / m:10.2f} {l_cpu / (c_cpu + b_cpu):6.2f} {l_wall:13.2f} {wall:11.2f}")
    load = os.getloadavg()
    print(f"\nload average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (machine shared with other jobs)")


if __name__ == "__main__":
    main()
