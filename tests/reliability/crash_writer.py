"""Child process of the write-crash campaign: appends until it is killed.

usage: crash_writer.py ROOT FLUSH_DISK_TYPE ACK_FILE SEED QUEUES

Continues every queue at its current max offset (sequence number == queue offset), mixing single
puts and batches, and now and then closes and reopens the store so kills also land in close() and in
recovery. After each put returns PUT_OK it appends ``"<queue> <first seq> <count>"`` to ACK_FILE with
one write(2) — the page cache keeps it through SIGKILL, so the parent knows what was acknowledged.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

from reliutil import TOPIC, message, open_store
from rocketstream.store import PutMessageStatus


def main() -> None:
    root, flush, ack_path = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    seed, queues = int(sys.argv[4]), int(sys.argv[5])
    rnd = random.Random(seed)
    ack = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    print("ready", flush=True)
    while True:
        store = open_store(root, flush_disk_type=flush)
        seq = [store.max_offset(TOPIC, q) for q in range(queues)]
        for _ in range(rnd.randrange(50, 400)):
            q = rnd.randrange(queues)
            if rnd.random() < 0.3:
                k = rnd.randrange(2, 9)
                r = store.put_messages([message(q, seq[q] + j, tags=False) for j in range(k)], q)
            else:
                k = 1
                r = store.put_message(message(q, seq[q]), q)
            if r.status is not PutMessageStatus.PUT_OK or r.queue_offset != seq[q]:
                raise SystemExit(f"put failed: {r} (expected queue offset {seq[q]})")
            os.write(ack, b"%d %d %d\n" % (q, seq[q], k))
            seq[q] += k
        store.close()


if __name__ == "__main__":
    main()
