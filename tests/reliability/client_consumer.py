"""A member of a consumer group for the client reliability campaigns (test_client_kill.py,
test_client_restart.py): our PushConsumer, concurrent or orderly, logging what it is given.

    python tests/reliability/client_consumer.py NAMESRV TOPIC GROUP OUT [--orderly] [--work-ms 0]

Lines appended to OUT, each written with one os.write (so a SIGKILL loses at most the line being written):
    STARTED <epoch_s> <pid>
    ALLOC <epoch_s> <q,q,...>            whenever the set of queues with a live ProcessQueue changes
    GOT <epoch_s> <queueId> <queueOffset> <body-queue> <body-seq> <reconsumeTimes>
A body is b"<queue>:<seq>:..." (tests/reliability/reliutil.py's convention). Runs until SIGTERM (clean
shutdown: offsets persisted, unregistered) or SIGKILL.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("namesrv")
    ap.add_argument("topic")
    ap.add_argument("group")
    ap.add_argument("out")
    ap.add_argument("--orderly", action="store_true")
    ap.add_argument("--work-ms", type=float, default=0)
    args = ap.parse_args()
    from rocketstream.client import push_consumer as pc

    fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(text: str) -> None:
        os.write(fd, text.encode())

    def lines_for(msgs) -> str:
        now = time.time()
        out = []
        for m in msgs:
            q, s = m.body.split(b":", 2)[:2]
            out.append(f"GOT {now:.3f} {m.queue_id} {m.queue_offset} {int(q)} {int(s)} {m.reconsume_times}\n")
        return "".join(out)

    statuses = _statuses(pc)
    if args.orderly:
        def listener(msgs, context=None):
            write(lines_for(msgs))
            if args.work_ms:
                time.sleep(args.work_ms / 1000)
            return statuses["orderly_ok"]
    else:
        def listener(msgs, context=None):
            write(lines_for(msgs))
            if args.work_ms:
                time.sleep(args.work_ms / 1000)
            return statuses["ok"]

    kw = {}
    if "first" in statuses:
        kw["consume_from_where"] = statuses["first"]
    c = pc.PushConsumer(args.group, namesrv=args.namesrv, **kw)
    c.subscribe(args.topic, "*")
    if args.orderly:
        c.register_message_listener_orderly(listener)
    else:
        c.register_message_listener_concurrently(listener)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    c.start()
    write(f"STARTED {time.time():.3f} {os.getpid()}\n")
    last = None
    while not stop.is_set():
        alloc = sorted(mq.queue_id for mq, pq in _process_queues(c).items()
                       if mq.topic == args.topic and not getattr(pq, "dropped", False))
        if alloc != last:
            write(f"ALLOC {time.time():.3f} {','.join(map(str, alloc))}\n")
            last = alloc
        stop.wait(0.05)
    c.shutdown()
    write(f"STOPPED {time.time():.3f}\n")
    os.close(fd)
    return 0


def _statuses(pc) -> dict:
    out = {}
    mods = [pc]
    for name in ("rocketstream.client.consume_service", "rocketstream.client.common",
                 "rocketstream.client.rebalance"):
        try:
            mods.append(__import__(name, fromlist=["x"]))
        except ImportError:
            pass
    for mod in mods:
        if "ok" not in out and hasattr(mod, "ConsumeConcurrentlyStatus"):
            out["ok"] = mod.ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        if "orderly_ok" not in out and hasattr(mod, "ConsumeOrderlyStatus"):
            out["orderly_ok"] = mod.ConsumeOrderlyStatus.SUCCESS
        if "first" not in out and hasattr(mod, "CONSUME_FROM_FIRST_OFFSET"):
            out["first"] = mod.CONSUME_FROM_FIRST_OFFSET
    return out


def _process_queues(c) -> dict:
    for path in (("rebalance", "process_queue_table"), ("rebalance_impl", "process_queue_table"),
                 ("_rebalance", "process_queue_table"), ("process_queue_table",)):
        obj = c
        try:
            for p in path:
                obj = getattr(obj, p)
        except AttributeError:
            continue
        return dict(obj)
    raise AttributeError("cannot find the PushConsumer's process queue table")


if __name__ == "__main__":
    sys.exit(main())
