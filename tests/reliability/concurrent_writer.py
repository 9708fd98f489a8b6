"""Child process of the concurrent-read campaign: appends N messages, then writes a totals file.

usage: concurrent_writer.py ROOT N QUEUES SEED PAUSE_EVERY

Sleeps 1 ms every PAUSE_EVERY puts (0: never) so that short runs still overlap many reader polls.

Singles and batches of up to 64 messages, spread at random over the queues; message ``seq`` of queue
``q`` has body ``reliutil.body(q, seq)``. At the end ``<ROOT>.done`` gets the per-queue totals.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

from reliutil import TOPIC, concurrent_sizes, message, open_store


def main() -> None:
    root, total, queues, seed = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    pause_every = int(sys.argv[5])
    rnd = random.Random(seed)
    store = open_store(root, **concurrent_sizes(total))
    seq = [store.max_offset(TOPIC, q) for q in range(queues)]
    written = puts = 0
    while written < total:
        puts += 1
        if pause_every and puts % pause_every == 0:
            time.sleep(0.001)
        q = rnd.randrange(queues)
        k = min(total - written, rnd.choice((1, 1, 2, 7, 32, 64)))
        if k == 1:
            r = store.put_message(message(q, seq[q]), q)
        else:
            r = store.put_messages([message(q, seq[q] + j, tags=False) for j in range(k)], q)
        if not r.ok or r.queue_offset != seq[q]:
            raise SystemExit(f"put failed: {r}")
        seq[q] += k
        written += k
    store.close()
    tmp = Path(f"{root}.done.tmp")
    tmp.write_text(json.dumps(seq))
    os.replace(tmp, f"{root}.done")


if __name__ == "__main__":
    main()
