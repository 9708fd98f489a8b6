"""CPU seconds per message of our client and our broker together, no JVM: for A/B runs on a shared machine,
where bench_client.py's and bench_broker.py's throughput ratios move with the load (CPU time counts only
what each process did).

    python tests/benchmarks/bench_client_cpu.py [--send 5000] [--batch 64000] [--drain 60000] [--threads 8]
                                                [--size 1024] [--cases send,batch,lite,push]

Starts ``rocketstream serve`` (bench_broker.py's start_ours and settings), then runs each case as
tests/benchmarks/client_worker.py runs it (sync sends from ``--threads`` threads sharing one producer, batches
of 32, a LitePullConsumer drain with pull batches of 32, a PushConsumer drain with a no-op listener) and prints,
per case, the client process's and the broker's CPU µs per message and the wall msgs/s; for the drains also
the client's CPU µs per message from the first message to the last (``drain``: without the process's start-up
and imports, ~0.35 s, which the whole process's figure spreads over the messages), and that split by thread
(the client's event loop, the consume threads, the main thread; 10 ms clock ticks, /proc/<pid>/task); for push
also each thread group's context switches per consume task (about one for the consume threads when the
hand-over is clean, many when they queue on a lock or the GIL inside their tasks). The
event loop follows ``ROCKETSTREAM_UVLOOP`` (rocketstream/remoting/loop.py) in both processes: run it with ``=0``
and ``=1`` in turn to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.benchmarks.bench_broker import cpu_seconds, start_ours, stop  # noqa: E402

WORKER = REPO / "tests" / "benchmarks" / "client_worker.py"
TOPIC = "CpuBenchTopic"


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_worker(*args: str, timeout: float) -> tuple[dict, float]:
    """client_worker.py's JSON result and the CPU seconds its process used."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    c0 = _children_cpu()
    res = subprocess.run([sys.executable, str(WORKER), *args], capture_output=True, text=True, timeout=timeout,
                         env=env)
    cpu = _children_cpu() - c0
    lines = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    if res.returncode != 0 or not lines or not lines[-1].get("ok"):
        raise RuntimeError(f"client_worker {' '.join(args[:3])} failed (exit {res.returncode}):\n"
                           f"{res.stdout[-2000:]}\n{res.stderr[-3000:]}")
    return lines[-1], cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--send", type=int, default=5_000)
    ap.add_argument("--batch", type=int, default=64_000)
    ap.add_argument("--drain", type=int, default=60_000)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--cases", default="send,batch,lite,push")
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()
    cases = args.cases.split(",")
    rows: list[tuple[str, int, float, float, float, float | None]] = []
    threads: list[tuple[str, dict[str, float]]] = []
    switches: list[tuple[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory(prefix="bench-client-cpu-") as tmp:
        served = start_ours(Path(tmp))
        pid = served.procs[0].pid
        ns = served.namesrv_addr
        common = ["--threads", str(args.threads), "--size", str(args.size)]
        try:
            def case(name: str, count: int, *worker_args: str) -> None:
                s0 = cpu_seconds(pid)
                res, cpu = run_worker(*worker_args, timeout=args.timeout)
                rows.append((name, count, 1e6 * cpu / count, 1e6 * (cpu_seconds(pid) - s0) / count,
                             float(res.get("msgs_per_s", 0)), res.get("drain_cpu_us_per_msg")))
                if res.get("drain_thread_cpu_us_per_msg"):
                    threads.append((name, res["drain_thread_cpu_us_per_msg"]))
                if res.get("drain_thread_switches_per_task"):
                    switches.append((name, res["drain_thread_switches_per_task"]))
            if "send" in cases:
                case("send", args.send + 2000, "send", ns, TOPIC, "--count", str(args.send), *common)
            # the drains read what the batch case wrote (and the sends before it)
            if "batch" in cases:
                case("batch", args.batch + 3200, "batch", ns, TOPIC, "--count", str(args.batch), *common)
            else:
                run_worker("batch", ns, TOPIC, "--count", str(args.drain), *common, timeout=args.timeout)
            if "lite" in cases:
                case("lite", args.drain, "lite", ns, TOPIC, "LiteCpuGroup", "--count", str(args.drain),
                     "--pull-batch", "32")
            if "push" in cases:
                case("push", args.drain, "push", ns, TOPIC, "PushCpuGroup", "--count", str(args.drain))
        finally:
            stop(served)
    loop = os.environ.get("ROCKETSTREAM_UVLOOP", "(default)")
    print(f"ROCKETSTREAM_UVLOOP={loop}  load {os.getloadavg()[0]:.1f}")
    print(f"{'case':<8}{'msgs':>9}{'client µs/msg':>15}{'broker µs/msg':>15}{'total':>9}{'msgs/s':>10}"
          f"{'drain µs/msg':>14}")
    for name, count, client, broker, rate, drain in rows:
        print(f"{name:<8}{count:>9}{client:>15.1f}{broker:>15.1f}{client + broker:>9.1f}{rate:>10,.0f}"
              f"{'' if drain is None else f'{drain:.1f}':>14}")
    for name, split in threads:
        print(f"{name:<8}drain µs/msg by thread: " + ", ".join(f"{k} {v:.2f}" for k, v in split.items()))
    for name, split in switches:
        print(f"{name:<8}context switches per consume task by thread: "
              + ", ".join(f"{k} {v:.2f}" for k, v in split.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
