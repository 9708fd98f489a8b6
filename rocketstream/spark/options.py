"""Options of the ``rocketmq`` Spark source, parsed once into a typed, frozen :class:`RocketMQOptions`.

Spark hands a Python data source its options in a case-insensitive dict whose keys are lower-cased,
so keys are matched case-insensitively here and reported back in their documented spelling. Every
bad value is an :class:`OptionError` naming the option; an unknown key is an error listing the valid
ones (a misspelt ``startingOffset`` must not silently read from the default position).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from rocketstream.client.allocate import STRATEGIES
from rocketstream.client.subscription import SubscriptionData
from rocketstream.errors import OptionError
from rocketstream.spark.offsets import (
    EARLIEST,
    GROUP,
    LATEST,
    AtTimestamp,
    EndPosition,
    Position,
    QueueOffsets,
    SpecificOffsets,
    StartPosition,
    TimestampsPerQueue,
)
from rocketstream.spark.secured import NOT_SECURED, SECRET_OPTIONS, SECURED_OPTIONS, SecuredOptions, parse_secured

# ---- option keys (documented spelling) ---------------------------------------------------------
PATH = "path"
TOPIC = "topic"
SUB_EXPRESSION = "subExpression"
STARTING_OFFSETS = "startingOffsets"
ENDING_OFFSETS = "endingOffsets"
STARTING_TIMESTAMP = "startingTimestamp"
ENDING_TIMESTAMP = "endingTimestamp"
CONSUMER_GROUP = "consumerGroup"
CONSUME_FROM_WHERE = "consumeFromWhere"
CONSUME_TIMESTAMP = "consumeTimestamp"
MESSAGE_MODEL = "messageModel"
ALLOCATE_STRATEGY = "allocateStrategy"
NUM_PARTITIONS = "numPartitions"
MIN_PARTITIONS = "minPartitions"  # alias of numPartitions (Kafka's name)
MAX_MESSAGES_PER_PARTITION = "maxMessagesPerPartition"
MAX_PARTITION_BYTES = "maxPartitionBytes"  # task size target (spark.sql.files.maxPartitionBytes' meaning)
OPEN_COST_IN_BYTES = "openCostInBytes"  # per queue range cost in bytes (spark.sql.files.openCostInBytes' meaning)
MAX_MESSAGES_PER_TRIGGER = "maxMessagesPerTrigger"
MAX_OFFSETS_PER_TRIGGER = "maxOffsetsPerTrigger"  # alias (Kafka's name)
MAX_BYTES_PER_TRIGGER = "maxBytesPerTrigger"
MIN_MESSAGES_PER_TRIGGER = "minMessagesPerTrigger"
MIN_OFFSETS_PER_TRIGGER = "minOffsetsPerTrigger"  # alias (Kafka's name)
MAX_TRIGGER_DELAY = "maxTriggerDelay"
FAIL_ON_DATA_LOSS = "failOnDataLoss"
CHECK_CRC = "checkCRC"  # verify every row's BODYCRC while reading (RocketMQ consumer's checkCRC)
BROKER_NAME = "brokerName"
BROKERS = "brokers"
BROKER_ADDR = "brokerAddr"  # local mode: the live broker serving the store (group commits go through it)
# strategy arguments (only read by the strategy that needs them)
CONSUMER_IDCS = "consumeridcs"  # MACHINE_ROOM: rooms whose queues (room@broker) are read
VIRTUAL_NODE_CNT = "virtualNodeCnt"  # CONSISTENT_HASH
ALLOCATE_QUEUES = "allocateQueues"  # CONFIG: "brokerName:queueId,..." the queues read
OFFSETS_STORE_DIR = "offsetsStoreDir"  # BROADCASTING: base dir of <clientId>/<group>/offsets.json
CLIENT_ID = "clientId"  # BROADCASTING: client id directory name
NAME_SERVER = "nameServer"  # network mode: "host:port[;host:port]"
NAMESRV_ADDR = "namesrvAddr"  # alias (RocketMQ's name)
TOPIC_PATTERN = "topicPattern"  # a regex (full match) over the topics, instead of topic
STARTING_OFFSETS_BY_TIMESTAMP = "startingOffsetsByTimestamp"  # {"topic": {"broker": {"queueId": ts_ms}}}
ENDING_OFFSETS_BY_TIMESTAMP = "endingOffsetsByTimestamp"
# what a start by timestamp does where no message is stored at or after it (Kafka's option name)
STARTING_OFFSETS_BY_TIMESTAMP_STRATEGY = "startingOffsetsByTimestampStrategy"
# how often a running stream reads its topics' routes (network) or the store's topics (topicPattern) again
ROUTE_REFRESH_INTERVAL = "routeRefreshIntervalMs"
POLL_NAME_SERVER_INTERVAL = "pollNameServerInterval"  # alias (ClientConfig's name, milliseconds)
# network tunables
REQUEST_TIMEOUT = "requestTimeoutMs"  # every request but a pull
MQ_CLIENT_API_TIMEOUT = "mqClientApiTimeout"  # alias (ClientConfig's name, milliseconds)
PULL_TIMEOUT = "pullTimeoutMs"  # a pull (consumerTimeoutMillisWhenSuspend)
PULL_BATCH_SIZE = "pullBatchSize"  # messages asked for per pull
PULL_RETRIES = "pullRetries"  # a pull that timed out or lost its connection is sent again this many times

ALL_OPTIONS: tuple[str, ...] = (
    PATH, TOPIC, SUB_EXPRESSION, STARTING_OFFSETS, ENDING_OFFSETS, STARTING_TIMESTAMP, ENDING_TIMESTAMP,
    CONSUMER_GROUP, CONSUME_FROM_WHERE, CONSUME_TIMESTAMP, MESSAGE_MODEL, ALLOCATE_STRATEGY, NUM_PARTITIONS,
    MIN_PARTITIONS, MAX_MESSAGES_PER_PARTITION, MAX_MESSAGES_PER_TRIGGER, MAX_OFFSETS_PER_TRIGGER,
    MAX_BYTES_PER_TRIGGER, MIN_MESSAGES_PER_TRIGGER, MIN_OFFSETS_PER_TRIGGER, MAX_TRIGGER_DELAY,
    FAIL_ON_DATA_LOSS, CHECK_CRC, BROKER_NAME, BROKERS, CONSUMER_IDCS, VIRTUAL_NODE_CNT, ALLOCATE_QUEUES,
    OFFSETS_STORE_DIR, CLIENT_ID, BROKER_ADDR, NAME_SERVER, NAMESRV_ADDR, TOPIC_PATTERN,
    STARTING_OFFSETS_BY_TIMESTAMP, ENDING_OFFSETS_BY_TIMESTAMP, STARTING_OFFSETS_BY_TIMESTAMP_STRATEGY,
    ROUTE_REFRESH_INTERVAL, POLL_NAME_SERVER_INTERVAL, REQUEST_TIMEOUT, MQ_CLIENT_API_TIMEOUT, PULL_TIMEOUT,
    PULL_BATCH_SIZE, PULL_RETRIES, MAX_PARTITION_BYTES, OPEN_COST_IN_BYTES,
    *SECURED_OPTIONS,  # accessKey, secretKey, securityToken, namespace, tls.* (rocketstream.spark.secured)
)
_CANONICAL = {k.lower(): k for k in ALL_OPTIONS}
_ALIASES = {MIN_PARTITIONS: NUM_PARTITIONS, MAX_OFFSETS_PER_TRIGGER: MAX_MESSAGES_PER_TRIGGER,
            MIN_OFFSETS_PER_TRIGGER: MIN_MESSAGES_PER_TRIGGER, NAMESRV_ADDR: NAME_SERVER,
            POLL_NAME_SERVER_INTERVAL: ROUTE_REFRESH_INTERVAL, MQ_CLIENT_API_TIMEOUT: REQUEST_TIMEOUT}
# Options that name or need a store directory: an error in network mode (and nameServer one in local mode).
LOCAL_ONLY = (PATH, BROKERS, BROKER_NAME, BROKER_ADDR)
# Options of network mode only: a local read sends no request.
NETWORK_ONLY = (REQUEST_TIMEOUT, PULL_TIMEOUT, PULL_BATCH_SIZE, PULL_RETRIES)

# ---- values -------------------------------------------------------------------------------------
CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"
CONSUME_FROM_WHERE_VALUES = (CONSUME_FROM_LAST_OFFSET, CONSUME_FROM_FIRST_OFFSET, CONSUME_FROM_TIMESTAMP)
CLUSTERING, BROADCASTING = "CLUSTERING", "BROADCASTING"
DEFAULT_CONSUMER_GROUP = "rocketstream-spark"
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000  # Kafka's default "15m"
DEFAULT_ROUTE_REFRESH_INTERVAL_MS = 30_000  # ClientConfig.pollNameServerInterval
DEFAULT_REQUEST_TIMEOUT_MS = 3_000  # ClientConfig.mqClientApiTimeout
DEFAULT_PULL_TIMEOUT_MS = 30_000  # DefaultMQPushConsumer.consumerTimeoutMillisWhenSuspend
# Asked per pull: as many as the broker's transfer limits allow (maxTransferCountOnMessageInMemory, 32 on a
# default broker — DefaultMQPushConsumer.pullBatchSize's 32 — more where an operator raised the limits).
DEFAULT_PULL_BATCH_SIZE = 4096
DEFAULT_PULL_RETRIES = 0  # a failed pull fails its task, which Spark retries (spark.task.maxFailures)
TIMESTAMP_STRATEGY_LATEST, TIMESTAMP_STRATEGY_ERROR = "latest", "error"
# Topics a pattern leaves out unless it names them literally: retry and dead-letter topics of groups
# (MixAll.RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX), TopicValidator.SYSTEM_TOPIC_SET (4.9.8 and 5.x)
# and its SYSTEM_TOPIC_PREFIX "rmq_sys_"; cluster and broker-name topics are left out by the caller.
SYSTEM_TOPIC_PREFIXES = ("%RETRY%", "%DLQ%", "rmq_sys_", "RMQ_SYS_")
SYSTEM_TOPICS = frozenset({"TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "TRANS_CHECK_MAX_TIME_TOPIC",
                           "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT"})
_NAME = re.compile(r"[%|A-Za-z0-9_-]{1,255}\Z")  # RocketMQ's topic / group character set
_DURATION = re.compile(r"\s*(\d+)\s*(ms|s|m|min|h|d)?\s*\Z", re.IGNORECASE)
_DURATION_MS = {None: 1, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True)
class RocketMQOptions:
    """Every option of the source, validated. Positions stay symbolic until the planner resolves them
    against the brokers (:mod:`rocketstream.spark.positions`)."""

    topics: tuple[str, ...]  # () with topicPattern: the topics are found by the planner (topics_matching)
    brokers: tuple[tuple[str, Path], ...]  # (brokerName, store root); () in network mode
    subscription: SubscriptionData
    # startingTimestamp over startingOffsets (as Spark's Kafka source); not given: batch earliest, stream group
    starting: StartPosition
    ending: EndPosition  # endingTimestamp over endingOffsets; not given: latest (a stream has no end)
    consumer_group: str
    consume_from_where: str
    consume_timestamp_ms: int | None
    message_model: str
    allocate_strategy: str
    strategy_args: tuple[tuple[str, object], ...] = field(default=())
    num_partitions: int | None = None
    max_messages_per_partition: int | None = None
    max_partition_bytes: int | None = None  # None: offset_ranges.DEFAULT_MAX_PARTITION_BYTES
    open_cost_in_bytes: int | None = None  # None: DEFAULT_LOCAL_OPEN_COST_BYTES (local), DEFAULT_OPEN_COST_BYTES
    max_messages_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    min_messages_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    fail_on_data_loss: bool = True
    check_crc: bool = False
    offsets_store_dir: Path | None = None
    client_id: str | None = None
    broker_addr: str | None = None  # host:port of a live broker serving the (single) store
    name_server: str | None = None  # network mode: the name server addresses ("a:9876;b:9876")
    topic_pattern: re.Pattern[str] | None = None  # topicPattern (full match), exclusive with topic
    # startingTimestamp / startingOffsetsByTimestamp where no message is at or after the time: latest or error
    timestamp_strategy: str = TIMESTAMP_STRATEGY_LATEST
    route_refresh_interval_ms: int = DEFAULT_ROUTE_REFRESH_INTERVAL_MS
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS
    pull_timeout_ms: int = DEFAULT_PULL_TIMEOUT_MS
    pull_batch_size: int = DEFAULT_PULL_BATCH_SIZE
    pull_retries: int = DEFAULT_PULL_RETRIES
    secured: SecuredOptions = NOT_SECURED  # network mode: ACL account, TLS, namespace (repr hides secrets)

    @property
    def network(self) -> bool:
        return self.name_server is not None

    @property
    def broadcasting(self) -> bool:
        return self.message_model == BROADCASTING


def parse_options(options: Mapping[str, str], *, streaming: bool) -> RocketMQOptions:
    """Validate ``options`` (keys in any case) for a batch (``streaming=False``) or streaming read."""
    given = _Given()
    for key, value in options.items():
        spelled = _CANONICAL.get(str(key).lower())
        if spelled is None:
            raise OptionError(str(key), f"unknown option; valid options: {', '.join(ALL_OPTIONS)}")
        canonical = _ALIASES.get(spelled, spelled)
        if canonical in given:
            raise OptionError(canonical, f"given twice (directly and through its alias {spelled})",
                              None if canonical in SECRET_OPTIONS else value)
        given[canonical] = "" if value is None else str(value)
        given.spelled[canonical] = spelled
    if streaming:
        for key in (ENDING_OFFSETS, ENDING_TIMESTAMP):
            if key in given:
                raise OptionError(key, "is for batch queries only; a stream has no end")

    strategy = _choice(given, ALLOCATE_STRATEGY, STRATEGIES, "AVG", prefix_ok="MACHINE_ROOM_NEARBY-")
    consume_from_where = _choice(given, CONSUME_FROM_WHERE, CONSUME_FROM_WHERE_VALUES, CONSUME_FROM_LAST_OFFSET)
    message_model = _choice(given, MESSAGE_MODEL, (CLUSTERING, BROADCASTING), CLUSTERING)
    # An option its mode ignores would silently read from somewhere else than the user asked for.
    _only_with(given, CONSUME_TIMESTAMP, consume_from_where == CONSUME_FROM_TIMESTAMP,
               f"{CONSUME_FROM_WHERE}={CONSUME_FROM_TIMESTAMP}")
    _only_with(given, ALLOCATE_QUEUES, strategy == "CONFIG", f"{ALLOCATE_STRATEGY}=CONFIG")
    _only_with(given, VIRTUAL_NODE_CNT, strategy == "CONSISTENT_HASH", f"{ALLOCATE_STRATEGY}=CONSISTENT_HASH")
    _only_with(given, CONSUMER_IDCS, strategy == "MACHINE_ROOM", f"{ALLOCATE_STRATEGY}=MACHINE_ROOM")
    for key in (OFFSETS_STORE_DIR, CLIENT_ID):
        _only_with(given, key, message_model == BROADCASTING, f"{MESSAGE_MODEL}={BROADCASTING}")
    topics, pattern = _topics(given)
    name_server = _name_server(given)
    if name_server is None:
        for key in NETWORK_ONLY:
            if key in given:
                raise OptionError(given.label(key), f"applies to network mode ('{NAME_SERVER}') only; a local read "
                                                    f"sends no request", given[key])
    brokers = () if name_server is not None else _brokers(given)
    subscription = SubscriptionData.parse_option(given.get(SUB_EXPRESSION, "*"), SUB_EXPRESSION)
    starting, ending = _positions(given, streaming=streaming)
    return RocketMQOptions(
        topics=topics,
        brokers=brokers,
        subscription=subscription,
        starting=starting,
        ending=ending,
        consumer_group=_name(given, CONSUMER_GROUP, DEFAULT_CONSUMER_GROUP),
        consume_from_where=consume_from_where,
        consume_timestamp_ms=_consume_timestamp(given),
        message_model=message_model,
        allocate_strategy=strategy,
        strategy_args=_strategy_args(given, strategy),
        num_partitions=_int(given, NUM_PARTITIONS, minimum=1),
        max_messages_per_partition=_int(given, MAX_MESSAGES_PER_PARTITION, minimum=1),
        max_partition_bytes=_int(given, MAX_PARTITION_BYTES, minimum=1),
        open_cost_in_bytes=_int(given, OPEN_COST_IN_BYTES, minimum=0),
        max_messages_per_trigger=_int(given, MAX_MESSAGES_PER_TRIGGER, minimum=1),
        max_bytes_per_trigger=_int(given, MAX_BYTES_PER_TRIGGER, minimum=1),
        min_messages_per_trigger=_int(given, MIN_MESSAGES_PER_TRIGGER, minimum=1),
        max_trigger_delay_ms=_duration(given, MAX_TRIGGER_DELAY),
        fail_on_data_loss=_bool(given, FAIL_ON_DATA_LOSS, True),
        check_crc=_bool(given, CHECK_CRC, False),
        offsets_store_dir=Path(given[OFFSETS_STORE_DIR]).expanduser() if given.get(OFFSETS_STORE_DIR) else None,
        client_id=given.get(CLIENT_ID) or None,
        broker_addr=_broker_addr(given),
        name_server=name_server,
        topic_pattern=pattern,
        timestamp_strategy=_timestamp_strategy(given),
        route_refresh_interval_ms=_millis(given, ROUTE_REFRESH_INTERVAL, DEFAULT_ROUTE_REFRESH_INTERVAL_MS, 1),
        request_timeout_ms=_millis(given, REQUEST_TIMEOUT, DEFAULT_REQUEST_TIMEOUT_MS, 1),
        pull_timeout_ms=_millis(given, PULL_TIMEOUT, DEFAULT_PULL_TIMEOUT_MS, 1),
        pull_batch_size=_bounded(given, PULL_BATCH_SIZE, DEFAULT_PULL_BATCH_SIZE, 1, 0x7FFFFFFF),
        pull_retries=_bounded(given, PULL_RETRIES, DEFAULT_PULL_RETRIES, 0, 100),
        secured=parse_secured(given, network=name_server is not None),
    )


# ---- value parsers ------------------------------------------------------------------------------

def _only_with(given: Mapping[str, str], key: str, applies: bool, needs: str) -> None:
    if key in given and not applies:
        raise OptionError(key, f"only applies with {needs}; set that or remove this option", given[key])


class _Given(dict[str, str]):
    """Options by canonical key; ``spelled`` keeps the name the user used (an alias) for messages."""

    def __init__(self) -> None:
        super().__init__()
        self.spelled: dict[str, str] = {}

    def label(self, key: str) -> str:
        return self.spelled.get(key, key)


def _topics(given: Mapping[str, str]) -> tuple[tuple[str, ...], re.Pattern[str] | None]:
    raw = given.get(TOPIC)
    if TOPIC_PATTERN in given:
        if raw is not None:
            raise OptionError(TOPIC_PATTERN, f"give either '{TOPIC}' or '{TOPIC_PATTERN}', not both",
                              given[TOPIC_PATTERN])
        text = given[TOPIC_PATTERN]
        if not text.strip():
            raise OptionError(TOPIC_PATTERN, "must be a regular expression matching whole topic names", text)
        try:
            return (), re.compile(text)
        except re.error as exc:
            raise OptionError(TOPIC_PATTERN, f"is not a valid regular expression: {exc}", text) from None
    if raw is None or not raw.strip():
        raise OptionError(TOPIC, f"is required: one topic or a comma-separated list (or '{TOPIC_PATTERN}')")
    topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
    for t in topics:
        if not _NAME.match(t):
            raise OptionError(TOPIC, f"topic {t!r} has characters outside [%|a-zA-Z0-9_-]", raw)
    if not topics:
        raise OptionError(TOPIC, "names no topic", raw)
    return topics, None


def topics_matching(pattern: re.Pattern[str], names: Iterable[str], excluded: Iterable[str] = ()) -> tuple[str, ...]:
    """The topics of ``names`` that ``pattern`` matches whole, in name order. Retry, dead-letter and system
    topics (:data:`SYSTEM_TOPICS`, :data:`SYSTEM_TOPIC_PREFIXES`) and ``excluded`` (the cluster and broker
    names a name server lists as topics) only when the pattern is that very name, character for character."""
    left_out = frozenset(excluded)
    chosen = []
    for name in sorted(set(names)):
        if not pattern.fullmatch(name):
            continue
        special = name in SYSTEM_TOPICS or name in left_out or name.startswith(SYSTEM_TOPIC_PREFIXES)
        if special and pattern.pattern != name:
            continue
        chosen.append(name)
    return tuple(chosen)


_ADDR = re.compile(r"[A-Za-z0-9_.\-]+:\d{1,5}\Z|\[[0-9A-Fa-f:.]+\]:\d{1,5}\Z")


def _name_server(given: _Given) -> str | None:
    """Network mode's name server list ("host:port;host:port"), or None (local mode)."""
    raw = given.get(NAME_SERVER)
    if raw is None:
        return None
    label = given.label(NAME_SERVER)
    for key in LOCAL_ONLY:
        if key in given and (key != PATH or given[key]):
            what = "a load() path" if key == PATH else f"option '{key}'"
            raise OptionError(key if key != PATH else PATH,
                              f"{what} reads a store directory (local mode) and cannot be combined with "
                              f"'{label}' (network mode); give one or the other", given[key])
    addrs = [a.strip() for a in raw.split(";") if a.strip()]
    if not addrs:
        raise OptionError(label, "expected 'host:port' or 'host:port;host:port'", raw)
    for a in addrs:
        if not _ADDR.match(a) or not 0 < int(a.rsplit(":", 1)[1]) < 65536:
            raise OptionError(label, f"{a!r} is not host:port; expected 'host:port' or 'host:port;host:port'", raw)
    return ";".join(addrs)


def _brokers(given: Mapping[str, str]) -> tuple[tuple[str, Path], ...]:
    raw, path = given.get(BROKERS), given.get(PATH)
    if raw is None:
        if not path:
            raise OptionError(PATH, f"is required: .load('<store root>') or option '{BROKERS}' (local mode), "
                                    f"or option '{NAME_SERVER}' (network mode)")
        name = given.get(BROKER_NAME, "")
        if BROKER_NAME in given and not _NAME.match(name):
            raise OptionError(BROKER_NAME, "must be a non-empty RocketMQ name", name)
        return ((name, Path(path).expanduser()),)
    if path:
        raise OptionError(BROKERS, f"give either '{BROKERS}' or a load() path, not both", raw)
    if BROKER_NAME in given:
        raise OptionError(BROKER_NAME, f"cannot be combined with '{BROKERS}' (which names every broker)")
    result: dict[str, Path] = {}
    for piece in (p.strip() for p in raw.split(",")):
        name, sep, root = piece.partition("=")
        name, root = name.strip(), root.strip()
        if not sep or not name or not root or not _NAME.match(name):
            raise OptionError(BROKERS, "expected 'broker-a=/path/a,broker-b=/path/b'", raw)
        if name in result:
            raise OptionError(BROKERS, f"broker {name!r} listed twice", raw)
        result[name] = Path(root).expanduser()
    return tuple(result.items())


def _broker_addr(given: Mapping[str, str]) -> str | None:
    raw = given.get(BROKER_ADDR)
    if raw is None:
        return None
    if BROKERS in given:
        raise OptionError(BROKER_ADDR, f"applies to a single load(path) store, not with '{BROKERS}'", raw)
    host, sep, port = raw.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise OptionError(BROKER_ADDR, "expected host:port of the broker serving the store (its listenPort)", raw)
    return raw.strip()


def _positions(given: Mapping[str, str], *, streaming: bool) -> tuple[StartPosition, EndPosition]:
    """Start and end; every position option is validated (in this order) even when another overrides it."""
    start = _position(given, STARTING_OFFSETS, (EARLIEST, LATEST, GROUP))
    end = _position(given, ENDING_OFFSETS, (LATEST,))
    start_ms = _int(given, STARTING_TIMESTAMP, minimum=0)
    end_ms = _int(given, ENDING_TIMESTAMP, minimum=0)
    start_times = _timestamps(given, STARTING_OFFSETS_BY_TIMESTAMP)
    end_times = _timestamps(given, ENDING_OFFSETS_BY_TIMESTAMP)
    if streaming and end_times is not None:
        raise OptionError(ENDING_OFFSETS_BY_TIMESTAMP, "is for batch queries only; a stream has no end")
    # startingTimestamp over startingOffsetsByTimestamp over startingOffsets (Spark's Kafka source's order)
    starting: StartPosition = (AtTimestamp(start_ms) if start_ms is not None
                               else start_times if start_times is not None
                               else start if start is not None else GROUP if streaming else EARLIEST)
    ending: EndPosition
    if end_ms is not None:
        ending = AtTimestamp(end_ms)
    elif end_times is not None:
        ending = end_times
    elif end is None or end is LATEST:
        ending = LATEST
    elif isinstance(end, SpecificOffsets):
        ending = end
    else:  # cannot happen: the only word an end accepts is latest
        raise OptionError(ENDING_OFFSETS, f"{end.value} is not a valid end")
    return starting, ending


def _timestamps(given: Mapping[str, str], key: str) -> TimestampsPerQueue | None:
    """``{"topic": {"brokerName": {"queueId": <epoch ms>}}}``: the shape of startingOffsets, timestamps as values."""
    raw = given.get(key)
    if raw is None:
        return None
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(key, f"is not valid JSON: {exc}", raw) from exc
    times = QueueOffsets.from_dict(obj, option=key, allow_special=False)
    if not times:
        raise OptionError(key, "names no queue", raw)
    return TimestampsPerQueue(times)


def _timestamp_strategy(given: Mapping[str, str]) -> str:
    raw = given.get(STARTING_OFFSETS_BY_TIMESTAMP_STRATEGY)
    if raw is None:
        return TIMESTAMP_STRATEGY_LATEST
    value = raw.strip().lower()
    if value not in (TIMESTAMP_STRATEGY_LATEST, TIMESTAMP_STRATEGY_ERROR):
        raise OptionError(STARTING_OFFSETS_BY_TIMESTAMP_STRATEGY,
                          f"must be {TIMESTAMP_STRATEGY_LATEST} or {TIMESTAMP_STRATEGY_ERROR}", raw)
    if STARTING_TIMESTAMP not in given and STARTING_OFFSETS_BY_TIMESTAMP not in given:
        raise OptionError(STARTING_OFFSETS_BY_TIMESTAMP_STRATEGY,
                          f"only applies with {STARTING_TIMESTAMP} or {STARTING_OFFSETS_BY_TIMESTAMP}", raw)
    return value


def _millis(given: Mapping[str, str], key: str, default: int, minimum: int) -> int:
    """A duration in milliseconds: a bare number (RocketMQ's ``...Millis`` settings) or '500ms', '30s', '1m'."""
    raw = given.get(key)
    if raw is None:
        return default
    m = _DURATION.match(raw)
    if not m:
        raise OptionError(_label(given, key), "must be milliseconds, or a duration such as '500ms', '30s', '1m'", raw)
    value = int(m.group(1)) * _DURATION_MS[m.group(2).lower() if m.group(2) else None]
    if value < minimum:
        raise OptionError(_label(given, key), f"must be at least {minimum} ms", raw)
    return value


def _bounded(given: Mapping[str, str], key: str, default: int, minimum: int, maximum: int) -> int:
    value = _int(given, key, minimum=minimum)
    if value is None:
        return default
    if value > maximum:
        raise OptionError(_label(given, key), f"must be <= {maximum}", given[key])
    return value


def _position(given: Mapping[str, str], key: str, words: tuple[Position, ...]) -> Position | SpecificOffsets | None:
    raw = given.get(key)
    if raw is None:
        return None
    text = raw.strip()
    for word in words:
        if text.lower() == word.value:
            return word
    if not text.startswith("{"):
        raise OptionError(key, f"expected one of {', '.join(w.value for w in words)} or a JSON object of offsets", raw)
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(key, f"is not valid JSON: {exc}", raw) from exc
    return SpecificOffsets(QueueOffsets.from_dict(obj, option=key, allow_special=True))


def _int(given: Mapping[str, str], key: str, *, minimum: int) -> int | None:
    raw = given.get(key)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(_label(given, key), "must be an integer", raw) from None
    if value < minimum:
        raise OptionError(_label(given, key), f"must be >= {minimum}", raw)
    return value


def _label(given: Mapping[str, str], key: str) -> str:
    return given.label(key) if isinstance(given, _Given) else key


def _bool(given: Mapping[str, str], key: str, default: bool) -> bool:
    raw = given.get(key)
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise OptionError(key, "must be true or false", raw)


def _choice(given: Mapping[str, str], key: str, values: tuple[str, ...], default: str, prefix_ok: str = "") -> str:
    raw = given.get(key)
    if raw is None:
        return default
    value = raw.strip().upper()
    if value in values or (prefix_ok and value.startswith(prefix_ok) and value[len(prefix_ok):] in values):
        return value
    raise OptionError(key, f"must be one of {', '.join(values)}", raw)


def _name(given: Mapping[str, str], key: str, default: str) -> str:
    raw = given.get(key)
    if raw is None:
        return default
    if not _NAME.match(raw):
        raise OptionError(key, "must be 1-255 characters of [%|a-zA-Z0-9_-]", raw)
    return raw


def _duration(given: Mapping[str, str], key: str) -> int:
    raw = given.get(key)
    if raw is None:
        return DEFAULT_MAX_TRIGGER_DELAY_MS
    m = _DURATION.match(raw)
    if not m:
        raise OptionError(key, "must be a duration such as '500ms', '30s', '15m', '1h' (bare number = ms)", raw)
    return int(m.group(1)) * _DURATION_MS[m.group(2).lower() if m.group(2) else None]


def _consume_timestamp(given: Mapping[str, str]) -> int | None:
    """``consumeTimestamp`` is ``yyyyMMddHHmmss`` in local time (RocketMQ's client); default: 30 min ago."""
    raw = given.get(CONSUME_TIMESTAMP)
    if raw is None:
        return None
    try:
        if not re.fullmatch(r"\d{14}", raw.strip()):
            raise ValueError
        return int(datetime.strptime(raw.strip(), "%Y%m%d%H%M%S").timestamp() * 1000)
    except ValueError:
        raise OptionError(CONSUME_TIMESTAMP, "must be yyyyMMddHHmmss (14 digits, local time)", raw) from None


def _strategy_args(given: Mapping[str, str], strategy: str) -> tuple[tuple[str, object], ...]:
    args: dict[str, object] = {}
    if strategy == "CONSISTENT_HASH" and VIRTUAL_NODE_CNT in given:
        args["virtual_node_cnt"] = _int(given, VIRTUAL_NODE_CNT, minimum=0)
    if strategy == "MACHINE_ROOM":
        rooms = [r.strip() for r in given.get(CONSUMER_IDCS, "").split(",") if r.strip()]
        if not rooms:
            raise OptionError(CONSUMER_IDCS, "MACHINE_ROOM needs the machine rooms to read, e.g. 'room1,room2'")
        args["consumeridcs"] = frozenset(rooms)
    if strategy == "CONFIG":
        raw = given.get(ALLOCATE_QUEUES, "")
        queues = []
        for piece in (p.strip() for p in raw.split(",") if p.strip()):
            broker, _, qid = piece.rpartition(":")
            if not qid.isdigit():
                raise OptionError(ALLOCATE_QUEUES, "expected 'queueId' or 'brokerName:queueId' items", raw)
            queues.append((broker, int(qid)))
        if not queues:
            raise OptionError(ALLOCATE_QUEUES, "CONFIG needs the queues to read, e.g. 'broker-a:0,broker-a:1'")
        args["config_queues"] = tuple(queues)
    return tuple(sorted(args.items()))
