"""Small stores for the Spark tests, and the store's own reads to compare Spark's rows with."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

TOPIC = "TopicTest"
TAGS = ("TagA", "TagB", None)


def fill(root: Path, n: int, *, topic: str = TOPIC, queues: int = 4, start: int = 0, big_every: int = 0) -> None:
    """Append ``n`` messages round robin over ``queues`` queues; message i has tag TAGS[i % 3], key k<i>,
    and (every ``big_every``-th) a body large enough to be stored compressed."""
    from rocketstream.store import Message, MessageStore

    with MessageStore.open(root, create=True) as store:
        if topic not in store.topics():
            store.create_topic(topic, queues)
        for i in range(start, start + n):
            body = f"body-{i}".encode()
            if big_every and i % big_every == 0:
                body = body * 1000
            msg = Message(topic=topic, body=body, tags=TAGS[i % len(TAGS)], keys=f"k{i}", properties={"i": str(i)})
            store.put_message(msg, queue_id=i % queues)


def store_rows(root: Path, broker: str, topic: str = TOPIC, columns=None, tags=None) -> pa.Table:
    """Every message of ``topic`` as the store itself reads it."""
    from rocketstream.store import MessageStore, project_schema

    batches = []
    with MessageStore.open(root, read_only=True) as store:
        for qid in store.queue_ids(topic):
            lo, hi = store.min_offset(topic, qid), store.max_offset(topic, qid)
            batches += list(store.read_range(topic, qid, lo, hi, broker_name=broker, columns=columns, tags=tags))
    return pa.Table.from_batches(batches, schema=project_schema(columns))


def max_offsets(root: Path, topic: str = TOPIC) -> dict[int, int]:
    from rocketstream.store import MessageStore

    with MessageStore.open(root, read_only=True) as store:
        return {q: store.max_offset(topic, q) for q in store.queue_ids(topic)}


def trimmed_store(root: Path) -> Path:
    """Two queues of 50 messages whose oldest commit-log files retention deleted: offsets [40, 50) remain."""
    from rocketstream.store import Message, MessageStore, StoreConfig

    config = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=4096)
    with MessageStore.open(root, create=True, config=config) as store:
        store.create_topic(TOPIC, 2)
        for i in range(100):
            store.put_message(Message(topic=TOPIC, body=b"x" * 50), queue_id=i % 2)
    with MessageStore.open(root) as store:
        store.delete_expired_files(reserved_hours=0)
    return root
