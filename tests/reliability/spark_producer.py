"""Producer for the Spark campaigns: appends self-describing messages to a store until done.

Usage: spark_producer.py <store root> <total messages> <queues> <messages per second, 0 = flat out>
       [<commit-log file size>]

Message i goes to queue i % queues with sequence i // queues (= its queue offset in a fresh store), in
batches of up to 64 per queue (``put_messages``) when flat out. Prints ``WROTE <n>`` now and then and
``DONE <n>`` at the end. Resumes after the last message already in the store, so a campaign can run it
several times over one store.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from rocketstream.store import Message, MessageStore, StoreConfig
from spark_reliutil import TOPIC, spark_body


def main() -> None:
    root, total, queues, rate = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    config = None
    if len(sys.argv) > 5:
        config = StoreConfig(root, mapped_file_size_commit_log=int(sys.argv[5]))
    with MessageStore.open(root, create=True, config=config) as store:
        if TOPIC not in store.topics():
            store.create_topic(TOPIC, queues)
        done = sum(store.max_offset(TOPIC, q) for q in range(queues))
        began = time.monotonic()
        step = 64 if rate <= 0 else max(1, int(rate // 50))
        last_report = 0
        while done < total:
            n = min(step, total - done)
            # whole rounds over the queues keep "message i -> queue i % queues" true for every prefix
            for q in range(queues):
                seqs = [s for s in range(done // queues, (done + n + queues - 1) // queues)
                        if s * queues + q >= done and s * queues + q < done + n]
                if seqs:
                    store.put_messages([Message(TOPIC, spark_body(q, s), tags=f"t{s % 3}") for s in seqs], q)
            done += n
            if done - last_report >= 10_000:
                print(f"WROTE {done}", flush=True)
                last_report = done
            if rate > 0:
                ahead = done / rate - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)
        store.flush()
    print(f"DONE {done}", flush=True)


if __name__ == "__main__":
    main()
