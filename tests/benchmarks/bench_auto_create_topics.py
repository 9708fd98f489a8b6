"""Auto-creating topics: the cost per topic at the end against the start (issue 19 defect 7: each
auto-created topic rewrote topics.json and re-registered the whole table; 500 topics took 16.8 s at
first, 84 s after 2,500).

    python tests/benchmarks/bench_auto_create_topics.py [--topics 3000] [--window 500] [--dir DIR]

A name server and a broker in this process, on one loop (as ``rocketstream serve`` runs them), over a
fresh store in a temporary directory; one connection sends one message to each of ``--topics`` new
topics in turn (SEND_MESSAGE_V2, created from TBW102), waiting for each answer. Printed: wall and CPU
seconds (this process: broker, name server and client) per window of ``--window`` topics, and the last
window's over the first's (the goal: about 1; on a loaded machine the CPU ratio is the one to trust). At the
end the name server must route every topic (the registrations carried them all).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from rocketstream.broker import BrokerConfig, BrokerController  # noqa: E402
from rocketstream.namesrv.controller import NamesrvConfig, NamesrvController  # noqa: E402
from rocketstream.remoting import RemotingCommand, RequestCode, connect  # noqa: E402
from tests.broker.brokerutil import send_v2  # noqa: E402


async def run(root: Path, topics: int, window: int) -> tuple[list[float], list[float]]:
    ns = await NamesrvController(NamesrvConfig(host="127.0.0.1", port=0)).start()
    broker = await BrokerController(BrokerConfig(store_path_root_dir=root, listen_port=0,
                                                 namesrv_addr=ns.address)).start()
    times: list[float] = []
    cpus: list[float] = []
    try:
        ch = await connect(broker.broker_addr)
        started, cpu = time.perf_counter(), time.process_time()
        for i in range(topics):
            resp = await ch.invoke(send_v2(f"AutoTopic{i}", b"x"), 30.0)
            if resp.code != 0:
                raise SystemExit(f"send to AutoTopic{i} failed: {resp}")
            if (i + 1) % window == 0:
                now, now_cpu = time.perf_counter(), time.process_time()
                times.append(now - started)
                cpus.append(now_cpu - cpu)
                print(f"topics {i + 2 - window:5d}-{i + 1:5d}: {now - started:7.2f} s wall, {now_cpu - cpu:7.2f} s CPU",
                      flush=True)
                started, cpu = now, now_cpu
        await ch.aclose()
        await broker.register_now()
        nch = await connect(ns.address)
        for i in (0, topics - 1):
            resp = await nch.invoke(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                            {"topic": f"AutoTopic{i}"}), 30.0)
            if resp.code != 0:
                raise SystemExit(f"the name server has no route for AutoTopic{i}: {resp.remark}")
        await nch.aclose()
    finally:
        await broker.stop()
        await ns.stop()
    return times, cpus


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topics", type=int, default=3000)
    ap.add_argument("--window", type=int, default=500)
    ap.add_argument("--dir", type=Path, default=None, help="parent of the temporary store (default: the system's)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        times, cpus = asyncio.run(run(Path(tmp) / "store", args.topics, args.window))
    if len(times) >= 2:
        print(f"last window / first window: {times[-1] / times[0]:.2f} wall, {cpus[-1] / cpus[0]:.2f} CPU")


if __name__ == "__main__":
    main()
