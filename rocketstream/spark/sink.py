"""The ``rocketmq`` sink: ``df.write.format("rocketmq")`` and ``df.writeStream.format("rocketmq")``.

Columns (checked on the driver when the write is planned; any other column is a :class:`ColumnError`):

* ``body`` - binary or string (UTF-8), required, never null;
* ``topic`` - string, or the ``topic`` option (one of the two, not both);
* ``tags`` - string; ``keys`` - string (space-separated keys) or array<string>;
* ``properties`` - map<string,string> of user properties;
* ``queueId`` - int: the queue of the row (else the rows of a task go round robin, one batch per queue).

Two modes, as the source: local (``.save("<store root>")`` / option ``path``) appends with the store's
columnar put (:meth:`MessageStore.put_batch`; rows with properties through ``put_messages``), one put per
batch of rows of one topic and queue, the store's writer lock taken by one task at a time; network
(option ``nameServer``, alias ``namesrvAddr``) sends with our :class:`~rocketstream.client.Producer`
``send_batch`` (SEND_BATCH_MESSAGE), at most ``batchSize`` rows and ``maxBatchBytes`` encoded bytes per
send (the broker refuses batches over its ``maxMessageSize``, 4 MiB by default).

Delivery is at-least-once: a task that fails after some of its batches were stored is retried by Spark
and stores them again, and a streaming micro-batch re-run after a failure is written again. A refused
send fails the task with the broker's answer (code and remark).

``exactlyOnce=true`` (network mode, writeStream, ``checkpointLocation`` given as an option): every row is
sent as a half message and the driver commits each micro-batch's halves once it has recorded the batch in
the checkpoint (:mod:`rocketstream.spark.exactly_once`); consumers see a batch's rows only once it is
committed, each row once.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import random
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)

from rocketstream.errors import ColumnError, OptionError, RocketStreamError, StoreLockedError
from rocketstream.spark.secured import (
    NOT_SECURED,
    SECURED_OPTIONS,
    SecuredOptions,
    parse_secured,
)

log = logging.getLogger("rocketstream.spark")

# ---- options ------------------------------------------------------------------------------------
PATH = "path"
NAME_SERVER = "nameServer"
NAMESRV_ADDR = "namesrvAddr"   # alias (the Java client's name)
TOPIC = "topic"
BATCH_SIZE = "batchSize"
MAX_BATCH_BYTES = "maxBatchBytes"
PRODUCER_GROUP = "producerGroup"
SEND_TIMEOUT_MS = "sendTimeoutMs"
RETRY_TIMES = "retryTimesWhenSendFailed"
BROKER_NAME = "brokerName"
LOCK_TIMEOUT_MS = "lockTimeoutMs"
EXACTLY_ONCE = "exactlyOnce"
SINK_OPTIONS = (PATH, NAME_SERVER, NAMESRV_ADDR, TOPIC, BATCH_SIZE, MAX_BATCH_BYTES, PRODUCER_GROUP, SEND_TIMEOUT_MS,
                RETRY_TIMES, BROKER_NAME, LOCK_TIMEOUT_MS, EXACTLY_ONCE,
                *SECURED_OPTIONS)   # accessKey, secretKey, tls.*, namespace
# options Spark itself passes to a streaming sink with the user's
CHECKPOINT_LOCATION = "checkpointLocation"
SPARK_STREAM_OPTIONS = (CHECKPOINT_LOCATION, "queryName")

_NAME = re.compile(r"[%|A-Za-z0-9_-]+")   # RocketMQ's topic / group character set
DEFAULT_BATCH_SIZE = 1024
MAX_MESSAGE_SIZE = 4 * 1024 * 1024   # DefaultMQProducer.maxMessageSize = the broker's default maxMessageSize
DEFAULT_PRODUCER_GROUP = "rocketstream-spark-sink"
DEFAULT_SEND_TIMEOUT_MS = 3000
DEFAULT_LOCK_TIMEOUT_MS = 120_000
IN_FLIGHT = 2   # network mode: send requests of one task outstanding at a time
# encoded size of one message of a SEND_BATCH body besides body, tags, keys and user properties:
# totalSize, magic, bodyCRC, flag (4 each) + body length (4) + properties length (2), and the properties the
# producer adds: UNIQ_KEY (8 + 32 + 2 separators) and WAIT=true (4 + 4 + 2); TAGS / KEYS cost 4 + 2 each
_FIXED_COST = 22 + 42 + 10
_NAMED_PROPERTY_COST = 6

# ---- columns -----------------------------------------------------------------------------------
BODY, TOPIC_COL, TAGS, KEYS, PROPERTIES, QUEUE_ID = "body", "topic", "tags", "keys", "properties", "queueId"
COLUMNS = (BODY, TOPIC_COL, TAGS, KEYS, PROPERTIES, QUEUE_ID)
_COLUMN_TYPES = {
    BODY: "binary or string",
    TOPIC_COL: "string",
    TAGS: "string",
    KEYS: "string or array<string>",
    PROPERTIES: "map<string,string>",
    QUEUE_ID: "int",
}


def _type_ok(name: str, t: DataType) -> bool:
    if name == BODY:
        return isinstance(t, (BinaryType, StringType))
    if name in (TOPIC_COL, TAGS):
        return isinstance(t, StringType)
    if name == KEYS:
        return isinstance(t, StringType) or (isinstance(t, ArrayType) and isinstance(t.elementType, StringType))
    if name == PROPERTIES:
        return isinstance(t, MapType) and isinstance(t.keyType, StringType) and isinstance(t.valueType, StringType)
    return isinstance(t, (IntegerType, LongType, ShortType, ByteType))


@dataclass(frozen=True)
class SinkOptions:
    """The sink's options, validated on the driver; travels to every task in the pickled writer."""

    path: Path | None
    name_server: str | None
    topic: str | None
    batch_size: int = DEFAULT_BATCH_SIZE
    max_batch_bytes: int = MAX_MESSAGE_SIZE
    producer_group: str = DEFAULT_PRODUCER_GROUP
    send_timeout_ms: int = DEFAULT_SEND_TIMEOUT_MS
    retry_times: int = 2
    broker_name: str | None = None
    lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS
    secured: SecuredOptions = NOT_SECURED   # network mode: ACL account, TLS, namespace (repr hides secrets)
    exactly_once: bool = False
    checkpoint: str | None = None   # exactlyOnce: the query's checkpointLocation (the commit record lives there)

    @property
    def network(self) -> bool:
        return self.name_server is not None


def parse_sink_options(options: Mapping[str, str], *, streaming: bool) -> SinkOptions:
    canonical = {k.lower(): k for k in SINK_OPTIONS}
    ignored = {k.lower() for k in SPARK_STREAM_OPTIONS} if streaming else set()
    given: dict[str, str] = {}
    checkpoint: str | None = None
    for key, value in options.items():
        low = str(key).lower()
        if low in ignored:
            if low == CHECKPOINT_LOCATION.lower() and value:
                checkpoint = str(value)
            continue
        spelled = canonical.get(low)
        if spelled is None:
            raise OptionError(str(key), f"unknown option of the rocketmq sink; valid options: "
                                        f"{', '.join(SINK_OPTIONS)}")
        name = NAME_SERVER if spelled == NAMESRV_ADDR else spelled
        if name in given:
            raise OptionError(spelled, f"given twice (directly and through its alias {NAMESRV_ADDR})", value)
        given[name] = "" if value is None else str(value)

    path = given.get(PATH) or None
    ns = given.get(NAME_SERVER)
    if ns is not None and not ns.strip():
        raise OptionError(NAME_SERVER, "must be 'host:port' or 'host:port;host:port'", ns)
    if path and ns:
        raise OptionError(PATH, f"give either a store path (local mode) or '{NAME_SERVER}' (network mode), not both",
                          path)
    if not path and not ns:
        raise OptionError(PATH, f"is required: .save('<store root>') for local mode, or option '{NAME_SERVER}' "
                                "('host:port') to write through a broker")
    if ns:
        for key in (LOCK_TIMEOUT_MS,):
            if key in given:
                raise OptionError(key, f"only applies in local mode (a store path), not with '{NAME_SERVER}'")
    else:
        for key in (PRODUCER_GROUP, SEND_TIMEOUT_MS, RETRY_TIMES, BROKER_NAME):
            if key in given:
                raise OptionError(key, f"only applies in network mode (option '{NAME_SERVER}'), not with a path")
    topic = given.get(TOPIC)
    if topic is not None:
        topic = topic.strip()
        _check_name(TOPIC, topic, 127)
    group = given.get(PRODUCER_GROUP, DEFAULT_PRODUCER_GROUP)
    _check_name(PRODUCER_GROUP, group, 255)
    broker = given.get(BROKER_NAME)
    if broker is not None:
        _check_name(BROKER_NAME, broker, 255)
    exactly_once = _bool(given, EXACTLY_ONCE)
    if exactly_once:
        if not ns:
            raise OptionError(EXACTLY_ONCE, f"needs network mode (option '{NAME_SERVER}'): a store written directly "
                                            "has no transactional messages to commit or roll back", "true")
        if not streaming:
            raise OptionError(EXACTLY_ONCE, "applies to df.writeStream (a streaming query, whose checkpoint holds "
                                            "the record of committed batches), not to df.write", "true")
        if checkpoint is None:
            raise OptionError(EXACTLY_ONCE, f"needs the query's '{CHECKPOINT_LOCATION}' given as an option of "
                                            "writeStream (the sink records its committed batches there)", "true")
    secured = parse_secured(given, network=bool(ns))
    return SinkOptions(
        path=Path(path).expanduser() if path else None,
        name_server=ns.strip() if ns else None,
        topic=topic,
        batch_size=_int(given, BATCH_SIZE, DEFAULT_BATCH_SIZE, 1),
        max_batch_bytes=_int(given, MAX_BATCH_BYTES, MAX_MESSAGE_SIZE, 1024),
        producer_group=group,
        send_timeout_ms=_int(given, SEND_TIMEOUT_MS, DEFAULT_SEND_TIMEOUT_MS, 1),
        retry_times=_int(given, RETRY_TIMES, 2, 0),
        broker_name=broker,
        lock_timeout_ms=_int(given, LOCK_TIMEOUT_MS, DEFAULT_LOCK_TIMEOUT_MS, 0),
        secured=secured,
        exactly_once=exactly_once,
        checkpoint=checkpoint if exactly_once else None,
    )


def _bool(given: Mapping[str, str], key: str) -> bool:
    raw = given.get(key)
    if raw is None:
        return False
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise OptionError(key, "must be true or false", raw)
    return value == "true"


def _check_name(key: str, value: str, limit: int) -> None:
    if not _NAME.fullmatch(value) or len(value) > limit:
        raise OptionError(key, f"must be 1-{limit} characters of [%|a-zA-Z0-9_-]", value)


def _int(given: Mapping[str, str], key: str, default: int, minimum: int) -> int:
    raw = given.get(key)
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(key, "must be an integer", raw) from None
    if value < minimum:
        raise OptionError(key, f"must be >= {minimum}", raw)
    return value


@dataclass(frozen=True)
class SinkColumns:
    """Which of the known columns the DataFrame has (validated against its schema)."""

    names: tuple[str, ...]
    body_is_string: bool
    keys_is_array: bool

    def has(self, name: str) -> bool:
        return name in self.names


def check_columns(schema: StructType, options: SinkOptions) -> SinkColumns:
    """Every column known and of its type; ``body`` present; a topic from exactly one place."""
    names: list[str] = []
    by_lower = {c.lower(): c for c in COLUMNS}
    for f in schema.fields:
        name = by_lower.get(f.name.lower())
        if name is None:
            raise ColumnError(f.name, f"is not a column the rocketmq sink writes; expected {', '.join(COLUMNS)} "
                                      "(select or drop columns before writing)")
        if name in names:
            raise ColumnError(f.name, "appears twice")
        if not _type_ok(name, f.dataType):
            raise ColumnError(f.name, f"must be {_COLUMN_TYPES[name]}, not {f.dataType.simpleString()}")
        names.append(name)
    if BODY not in names:
        raise ColumnError(BODY, "is required (binary or string)")
    if TOPIC_COL in names and options.topic is not None:
        raise ColumnError(TOPIC_COL, f"give the topic either as a column or as the '{TOPIC}' option, not both")
    if TOPIC_COL not in names and options.topic is None:
        raise ColumnError(TOPIC_COL, f"is required unless the '{TOPIC}' option names the topic")
    body_t = next(f.dataType for f in schema.fields if f.name.lower() == BODY)
    keys_t = next((f.dataType for f in schema.fields if f.name.lower() == KEYS), None)
    # position in the schema = position in every Arrow batch; keep the schema's order
    return SinkColumns(tuple(names), isinstance(body_t, StringType), isinstance(keys_t, ArrayType))


# ---- what a task reports -------------------------------------------------------------------------

@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """Rows written by one task, per ``topic``/``brokerName``/``queueId``: (messages, first queue offset)."""

    rows: int = 0
    queues: dict[tuple[str, str, int], list[int]] = field(default_factory=dict)

    def add(self, topic: str, broker: str, queue_id: int, count: int, first_offset: int) -> None:
        entry = self.queues.setdefault((topic, broker, queue_id), [0, first_offset])
        entry[0] += count
        entry[1] = min(entry[1], first_offset)
        self.rows += count


# ---- one batch of rows of one topic and queue ------------------------------------------------------

@dataclass
class Chunk:
    topic: str
    queue_id: int | None
    bodies: pa.BinaryArray
    tags: list[str | None] | None
    keys: list[str | None] | None
    properties: list[dict[str, str] | None] | None


def _as_binary(arr: pa.Array) -> pa.Array:
    if pa.types.is_large_binary(arr.type) or pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type) \
            or pa.types.is_binary_view(arr.type) or pa.types.is_string_view(arr.type):
        return pc.cast(arr, pa.binary())
    return arr


def _lengths(arr: pa.Array | None, n: int) -> np.ndarray:
    if arr is None:
        return np.zeros(n, dtype=np.int64)
    return np.asarray(pc.fill_null(pc.binary_length(arr), 0).to_numpy(zero_copy_only=False), dtype=np.int64)


def _keys_text(arr: pa.Array, is_array: bool) -> pa.Array:
    if not is_array:
        return arr
    return pa.array([" ".join(k) if k else None for k in arr.to_pylist()], pa.string())


def split_batch(rb: pa.RecordBatch, cols: SinkColumns, options: SinkOptions) -> Iterator[Chunk]:
    """Rows of ``rb`` as chunks of one topic and queue, each within ``batchSize`` rows and ``maxBatchBytes``.

    ``queue_id`` None: the caller picks the queue (round robin). Raises :class:`ColumnError` for a null body,
    topic or queueId, and for a row too big to be sent at all."""
    n = rb.num_rows
    if n == 0:
        return
    col = {name: rb.column(i) for i, name in enumerate(cols.names)}
    body = _as_binary(col[BODY])
    if body.null_count:
        raise ColumnError(BODY, f"is null in {body.null_count} row(s); a message needs a body")
    topic_arr = col.get(TOPIC_COL)
    if topic_arr is not None and topic_arr.null_count:
        raise ColumnError(TOPIC_COL, f"is null in {topic_arr.null_count} row(s)")
    qid_arr = col.get(QUEUE_ID)
    if qid_arr is not None:
        if qid_arr.null_count:
            raise ColumnError(QUEUE_ID, f"is null in {qid_arr.null_count} row(s)")
        qmin = pc.min(qid_arr).as_py()
        if qmin is not None and qmin < 0:
            raise ColumnError(QUEUE_ID, f"must be >= 0 (got {qmin})")
    tags = col.get(TAGS)
    keys = _keys_text(col[KEYS], cols.keys_is_array) if KEYS in col else None
    props = col.get(PROPERTIES)
    props_list: list[dict[str, str] | None] | None = None
    cost = _lengths(body, n) + _FIXED_COST
    if tags is not None:
        cost += _lengths(tags, n) + _NAMED_PROPERTY_COST
    if keys is not None:
        cost += _lengths(keys, n) + _NAMED_PROPERTY_COST
    if props is not None and props.null_count < n:
        props_list = [None if p is None else dict(p) for p in props.to_pylist()]
        for i, p in enumerate(props_list):
            if p:
                if any(v is None for v in p.values()):
                    raise ColumnError(PROPERTIES, "a property value is null (RocketMQ properties are strings)")
                cost[i] += sum(len(k.encode()) + len(v.encode()) + 2 for k, v in p.items())
    big = int(np.argmax(cost))
    if cost[big] > options.max_batch_bytes:
        raise ColumnError(BODY, f"a message of about {int(cost[big])} encoded bytes does not fit in a batch of "
                                f"{MAX_BATCH_BYTES}={options.max_batch_bytes} (the broker's maxMessageSize)")

    # group rows by (topic, queueId): stable, so rows of one group keep their order
    topics = [options.topic] if topic_arr is None else None
    if topic_arr is None and qid_arr is None:
        groups: list[tuple[str, int | None, np.ndarray | None]] = [(str(options.topic), None, None)]
    else:
        t_codes: np.ndarray
        if topic_arr is not None:
            enc = pc.dictionary_encode(topic_arr).combine_chunks() if isinstance(topic_arr, pa.ChunkedArray) \
                else pc.dictionary_encode(topic_arr)
            topics = enc.dictionary.to_pylist()
            t_codes = np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
        else:
            t_codes = np.zeros(n, dtype=np.int64)
        q = np.asarray(qid_arr.to_numpy(zero_copy_only=False), dtype=np.int64) if qid_arr is not None \
            else np.full(n, -1, dtype=np.int64)
        key = t_codes * (1 << 32) + (q + 1)
        order = np.argsort(key, kind="stable")
        sorted_key = key[order]
        bounds = np.flatnonzero(np.diff(sorted_key)) + 1
        groups = []
        assert topics is not None
        for rows in np.split(order, bounds):
            k = int(key[rows[0]])
            q_of = int(q[rows[0]])
            groups.append((str(topics[k >> 32]), None if q_of < 0 else q_of, rows))

    for topic, qid, idx in groups:
        g_body = body if idx is None else body.take(pa.array(idx))
        g_tags = tags if idx is None or tags is None else tags.take(pa.array(idx))
        g_keys = keys if idx is None or keys is None else keys.take(pa.array(idx))
        g_props = props_list if idx is None or props_list is None else [props_list[i] for i in idx]
        g_cost = cost if idx is None else cost[idx]
        for start, stop in _chunk_bounds(g_cost, options.batch_size, options.max_batch_bytes):
            yield Chunk(topic, qid, g_body.slice(start, stop - start),
                        None if g_tags is None else g_tags.slice(start, stop - start).to_pylist(),
                        None if g_keys is None else g_keys.slice(start, stop - start).to_pylist(),
                        None if g_props is None else g_props[start:stop])


def _chunk_bounds(cost: np.ndarray, batch_size: int, max_bytes: int) -> Iterator[tuple[int, int]]:
    n = len(cost)
    start = 0
    cum = np.cumsum(cost)
    while start < n:
        base = cum[start - 1] if start else 0
        # last row whose running total from start stays within max_bytes
        by_bytes = int(np.searchsorted(cum, base + max_bytes, side="right"))
        stop = min(start + batch_size, max(by_bytes, start + 1), n)
        yield start, stop
        start = stop


# ---- targets --------------------------------------------------------------------------------------

class _LocalTarget:
    """Appends to a store directory; the writer lock is taken for the task (waiting for other tasks)."""

    def __init__(self, options: SinkOptions) -> None:
        from rocketstream.store import MessageStore

        assert options.path is not None
        deadline = time.monotonic() + options.lock_timeout_ms / 1000
        delay = 0.01
        while True:
            try:
                self.store = MessageStore.open(options.path)
                break
            except StoreLockedError as exc:
                if time.monotonic() >= deadline:
                    raise StoreLockedError(
                        f"{exc} (waited {LOCK_TIMEOUT_MS}={options.lock_timeout_ms} ms for the store's writer "
                        f"lock; write through the broker that serves the store with option '{NAME_SERVER}')",
                        path=options.path) from exc
                time.sleep(delay)
                delay = min(delay * 2, 0.2)
        self.broker = self.store.broker_name
        self._next: dict[str, int] = {}

    def put(self, chunk: Chunk, out: SinkCommitMessage) -> None:
        from rocketstream.store import Message

        store = self.store
        qid = chunk.queue_id
        if qid is None:
            nums = store.topic_config.queue_nums(chunk.topic) or store.config.default_topic_queue_nums
            i = self._next.setdefault(chunk.topic, random.randrange(nums))
            qid = i % nums
            self._next[chunk.topic] = i + 1
        if chunk.properties is None or not any(chunk.properties):
            result = store.put_batch(chunk.topic, qid, chunk.bodies, tags=chunk.tags, keys=chunk.keys)
        else:
            bodies = chunk.bodies.to_pylist()
            n = len(bodies)
            tags, keys, props = chunk.tags or [None] * n, chunk.keys or [None] * n, chunk.properties
            result = store.put_messages([Message(chunk.topic, b, tags=t, keys=k, properties=dict(p or {}))
                                         for b, t, k, p in zip(bodies, tags, keys, props, strict=True)], qid)
        if result.status.name != "PUT_OK":
            raise RocketStreamError(f"store {store.root} refused {len(chunk.bodies)} message(s) for "
                                    f"{chunk.topic}:{qid}: {result.status.name} {result.reason or ''}".rstrip())
        out.add(chunk.topic, self.broker, qid, len(chunk.bodies), result.queue_offset)

    def close(self) -> None:
        self.store.close()


class _NetworkTarget:
    """Sends through a Producer of its own (a client instance per task: nothing shared with other tasks)."""

    def __init__(self, options: SinkOptions) -> None:
        from rocketstream.client import Producer

        assert options.name_server is not None
        self.options = options
        secured = options.secured
        self._wire = secured.wrap   # topics and the producer group in the namespace (NamespaceUtil.wrapNamespace)
        self.producer = Producer(secured.wrap(options.producer_group), namesrv=options.name_server,
                                 instance_name=f"spark-sink-{uuid.uuid4().hex[:12]}",
                                 credentials=secured.credentials, **({"tls": secured.tls} if secured.tls else {}),
                                 send_msg_timeout=options.send_timeout_ms / 1000,
                                 retry_times_when_send_failed=options.retry_times,
                                 max_message_size=options.max_batch_bytes).start()
        self._queues: dict[tuple[str, int], Any] = {}
        # round-robin batches are sent from a thread, IN_FLIGHT at a time, while the task prepares the next;
        # rows with a queueId are sent in order (the pending sends complete first)
        self._pool = concurrent.futures.ThreadPoolExecutor(IN_FLIGHT, thread_name_prefix="rocketmq-sink")
        self._pending: collections.deque[tuple[concurrent.futures.Future[Any], int]] = collections.deque()
        self._out: SinkCommitMessage | None = None

    def _queue(self, topic: str, queue_id: int) -> Any:
        from rocketstream.client.common import MessageQueue

        mq = self._queues.get((topic, queue_id))
        if mq is not None:
            return mq
        inst = self.producer.instance
        t = self.options.send_timeout_ms / 1000
        inst.run(inst.update_route(self._wire(topic), timeout=t), t + 1.0)
        route = inst.topic_route(self._wire(topic))
        if route is None:
            raise RocketStreamError(f"topic {topic} has no route on name server {self.options.name_server}; "
                                    f"create it before writing rows with a {QUEUE_ID} column")
        brokers = sorted({qd.broker_name for qd in route.queue_datas if qd.write_queue_nums > queue_id})
        if self.options.broker_name is not None:
            if self.options.broker_name not in brokers:
                raise ColumnError(QUEUE_ID, f"topic {topic} has no writable queue {queue_id} on broker "
                                            f"{self.options.broker_name} (brokers with it: {brokers})")
            broker = self.options.broker_name
        elif len(brokers) == 1:
            broker = brokers[0]
        elif not brokers:
            raise ColumnError(QUEUE_ID, f"topic {topic} has no writable queue {queue_id}")
        else:
            raise OptionError(BROKER_NAME, f"topic {topic} has queue {queue_id} on several brokers {brokers}: name "
                                           f"the broker of the {QUEUE_ID} column")
        mq = MessageQueue(self._wire(topic), broker, queue_id)
        self._queues[(topic, queue_id)] = mq
        return mq

    def put(self, chunk: Chunk, out: SinkCommitMessage) -> None:
        from rocketstream.client import Message

        bodies = chunk.bodies.to_pylist()
        n = len(bodies)
        tags, keys = chunk.tags or [None] * n, chunk.keys or [None] * n
        props = chunk.properties or [None] * n
        topic = self._wire(chunk.topic)
        msgs = [Message(topic, b, tags=t, keys=k, properties=dict(p) if p else {})
                for b, t, k, p in zip(bodies, tags, keys, props, strict=True)]
        self._out = out
        if chunk.queue_id is not None:
            self.drain()
            queue = self._queue(chunk.topic, chunk.queue_id)
            self._done(self.producer.send_batch(topic, msgs, queue=queue), n)
            return
        while len(self._pending) >= IN_FLIGHT:
            self._wait_one()
        self._pending.append((self._pool.submit(self.producer.send_batch, topic, msgs), n))

    def _wait_one(self) -> None:
        future, n = self._pending.popleft()
        self._done(future.result(), n)

    def drain(self) -> None:
        while self._pending:
            self._wait_one()

    def _done(self, result: Any, n: int) -> None:
        if result.status.name != "SEND_OK":
            log.warning("rocketmq sink: batch of %d to %s stored with status %s", n, result.queue, result.status.name)
        assert self._out is not None
        self._out.add(self.options.secured.unwrap(result.queue.topic), result.queue.broker_name,
                      result.queue.queue_id, n, result.queue_offset)

    def close(self) -> None:
        try:
            self.drain()   # a failed send raises here (after the others were waited for by shutdown below)
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self.producer.shutdown()


class _ExactlyOnceTarget(_NetworkTarget):
    """Sends every row as a half message (exactly_once.HalfSender); nothing is visible until the driver commits."""

    def __init__(self, options: SinkOptions) -> None:
        from rocketstream.spark import exactly_once as eos

        assert options.name_server is not None and options.checkpoint is not None
        self.options = options
        self.batch_id = eos.task_batch_id()
        self._wire = options.secured.wrap
        self.sender = eos.HalfSender(options.name_server, options.producer_group,
                                     eos.transaction_group(options.checkpoint), options.send_timeout_ms,
                                     options.max_batch_bytes, self.batch_id, options.secured)
        self.producer = self.sender.producer
        self._queues = {}
        self._kill_after: int | None = None
        if eos.kill_wanted("task", self.batch_id) and eos.task_attempt_number() == 0:
            self._kill_after = 1

    def put(self, chunk: Chunk, out: SinkCommitMessage) -> None:
        from rocketstream.client import Message
        from rocketstream.spark import exactly_once as eos

        bodies = chunk.bodies.to_pylist()
        n = len(bodies)
        tags, keys = chunk.tags or [None] * n, chunk.keys or [None] * n
        props = chunk.properties or [None] * n
        msgs = [Message(self._wire(chunk.topic), b, tags=t, keys=k, properties=dict(p) if p else {})
                for b, t, k, p in zip(bodies, tags, keys, props, strict=True)]
        queue = None if chunk.queue_id is None else self._queue(chunk.topic, chunk.queue_id)
        if self._kill_after is not None and n > 1:
            self.sender.send(msgs[:n // 2], queue)
            eos.kill_point("task", self.batch_id)
            msgs = msgs[n // 2:]
        self.sender.send(msgs, queue)
        out.rows += len(msgs)

    def drain(self) -> None:
        pass

    def close(self) -> None:
        self.sender.close()


def _put_all(options: SinkOptions, cols: SinkColumns, batches: Iterator[pa.RecordBatch],
             make_target: Callable[[], Any], counts: SinkCommitMessage) -> Any:
    """Every Arrow batch split into chunks and put to one target, made at the first chunk and closed at the end
    (on a failure too, the first error being the one raised); the target, None when no row came."""
    target = None
    try:
        for rb in batches:
            for chunk in split_batch(rb, cols, options):
                if target is None:
                    target = make_target()
                target.put(chunk, counts)
    except BaseException:
        if target is not None:
            try:
                target.close()
            except Exception as exc:   # the first error is the one to report
                log.warning("rocketmq sink: closing after a failure: %s", exc)
        raise
    if target is not None:
        target.close()
    return target


def write_halves(options: SinkOptions, cols: SinkColumns, batches: Iterator[pa.RecordBatch]) -> Any:
    """What a task of an exactly-once query does: every row sent as a half message; the task's halves."""
    target = _put_all(options, cols, batches, lambda: _ExactlyOnceTarget(options), SinkCommitMessage())
    return None if target is None else target.sender.out


def write_batches(options: SinkOptions, cols: SinkColumns, batches: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
    """What a task does: every Arrow batch split into chunks, each stored or sent; the task's counts."""
    out = SinkCommitMessage()
    _put_all(options, cols, batches,
             lambda: _NetworkTarget(options) if options.network else _LocalTarget(options), out)
    return out


def _check_local_store(options: SinkOptions) -> None:
    """Driver side, before any task: a store a broker is serving is written through the broker; a store that
    does not exist yet is created here, once (tasks racing to create it could see a half-made directory)."""
    if options.path is None:
        return
    from rocketstream.store import MessageStore
    from rocketstream.store.files.lock import StoreLock

    if (options.path / "lock").exists():
        lock = StoreLock(options.path)
        try:
            lock.acquire()
        except StoreLockedError as exc:
            raise StoreLockedError(f"{exc}. The rocketmq sink does not write under a running broker: write through "
                                   f"it with option '{NAME_SERVER}' instead of a path", path=options.path) from exc
        lock.release()
    if not (options.path / "commitlog").is_dir():
        MessageStore.open(options.path).close()


# ---- the Spark writers ---------------------------------------------------------------------------------

class RocketMQWriter(DataSourceArrowWriter):
    """``df.write.format("rocketmq")``: every task writes its rows; nothing to undo on abort (at-least-once)."""

    def __init__(self, options: SinkOptions, columns: SinkColumns) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return write_batches(self.options, self.columns, iterator)

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        rows = sum(m.rows for m in messages if isinstance(m, SinkCommitMessage))
        log.info("rocketmq sink: %d row(s) written by %d task(s)", rows, len(messages))

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        done = sum(m.rows for m in messages if isinstance(m, SinkCommitMessage))
        log.warning("rocketmq sink: write failed; %d row(s) written by tasks that completed stay stored "
                    "(a message queue cannot take them back)", done)


class RocketMQStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("rocketmq")``: at-least-once. A micro-batch's rows are sent by its tasks; a
    batch re-run after a failure (or a restart before its commit) sends them again."""

    def __init__(self, options: SinkOptions, columns: SinkColumns) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return write_batches(self.options, self.columns, iterator)

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        rows = sum(m.rows for m in messages if isinstance(m, SinkCommitMessage))
        log.info("rocketmq sink: micro-batch %d: %d row(s) written", batchId, rows)

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        done = sum(m.rows for m in messages if isinstance(m, SinkCommitMessage))
        log.warning("rocketmq sink: micro-batch %d failed; %d row(s) already stored will be written again "
                    "when the batch is retried (at-least-once)", batchId, done)


class RocketMQExactlyOnceStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("rocketmq").option("exactlyOnce", "true")``: tasks send half messages, the
    driver's commit ends them (rocketstream/spark/exactly_once.py). Built on the driver: there it also makes
    sure the query's check-back responder runs."""

    def __init__(self, options: SinkOptions, columns: SinkColumns) -> None:
        from rocketstream.spark import exactly_once as eos

        assert options.checkpoint is not None and options.name_server is not None
        self.options = options
        self.columns = columns
        eos.check_kill_env()
        root = Path(options.checkpoint) / eos.STATE_DIR
        eos.Responder.ensure(root, eos.transaction_group(options.checkpoint), options.name_server,
                             options.secured)

    def _committer(self) -> Any:
        from rocketstream.spark import exactly_once as eos

        assert self.options.checkpoint is not None and self.options.name_server is not None
        return eos.Committer(eos.CommitRecord(Path(self.options.checkpoint) / eos.STATE_DIR),
                             self.options.name_server, eos.transaction_group(self.options.checkpoint),
                             self.options.send_timeout_ms / 1000, self.options.secured)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Any:
        return write_halves(self.options, self.columns, iterator)

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        rows = self._committer().commit(messages, batchId)
        log.info("rocketmq sink: micro-batch %d: %d row(s) committed", batchId, rows)

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        self._committer().abort(messages, batchId)
        log.warning("rocketmq sink: micro-batch %d failed; its half messages are rolled back", batchId)


def sink_writer(options: Mapping[str, str], schema: StructType, overwrite: bool, *, streaming: bool) -> Any:
    parsed = parse_sink_options(options, streaming=streaming)
    if overwrite and not streaming:
        raise OptionError("mode", "a RocketMQ topic is append-only: use mode('append') (overwrite is not supported)",
                          "overwrite")
    columns = check_columns(schema, parsed)
    _check_local_store(parsed)
    if parsed.exactly_once:
        return RocketMQExactlyOnceStreamWriter(parsed, columns)
    if streaming:
        return RocketMQStreamWriter(parsed, columns)
    return RocketMQWriter(parsed, columns)
