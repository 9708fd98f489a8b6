"""Producer for the network Spark campaign: sends self-describing messages to a broker through our
Producer, one queue after another, and logs every acknowledged send.

Usage: spark_net_producer.py <name server> <broker name> <total> <queues> <messages per second> <ack log>
       <stop file>

Message i goes to queue i % queues with body ``spark_body(queue, i // queues)``. A send that fails (the
broker is down) is retried, same body, until it is acknowledged — so a message in flight at a kill may be
stored twice, at two offsets (at-least-once, as every RocketMQ producer). Every SEND_OK is appended to the
ack log as ``OK <queue> <queue offset> <seq>``; failures as ``FAIL <queue> <seq> <error>``. Stops after
``total`` acknowledged messages or when the stop file exists. Prints ``DONE <n>``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from rocketstream.client.allocate import MessageQueue
from rocketstream.client.common import SendStatus
from rocketstream.client.producer import Producer
from rocketstream.errors import RocketStreamError
from spark_reliutil import TOPIC, spark_body


def main() -> None:
    namesrv, broker_name = sys.argv[1], sys.argv[2]
    total, queues, rate = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    acks, stop = Path(sys.argv[6]), Path(sys.argv[7])
    producer = Producer("RelNetProducer", namesrv=namesrv, send_msg_timeout=3.0,
                        retry_times_when_send_failed=0).start()
    began = time.monotonic()
    done = 0
    with open(acks, "a", buffering=1) as log:
        try:
            while done < total and not stop.exists():
                q, seq = done % queues, done // queues
                try:
                    result = producer.send(TOPIC, spark_body(q, seq), tags=f"t{seq % 3}",
                                           queue=MessageQueue(TOPIC, broker_name, q))
                except RocketStreamError as exc:
                    log.write(f"FAIL {q} {seq} {type(exc).__name__}\n")
                    time.sleep(0.1)
                    continue
                if result.status is not SendStatus.SEND_OK:
                    log.write(f"FAIL {q} {seq} {result.status.name}\n")
                    time.sleep(0.1)
                    continue
                log.write(f"OK {q} {result.queue_offset} {seq}\n")
                done += 1
                ahead = done / rate - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)
        finally:
            producer.shutdown()
    print(f"DONE {done}", flush=True)


if __name__ == "__main__":
    main()
