"""What a producer hands the store (``Message``), what put/get return, and the broker-side rewrite
of a message before it is appended (``DefaultMQProducerImpl.sendKernelImpl``, ``CommitLog.putMessage``):
UNIQ_KEY, WAIT, TAGS/KEYS properties, body compression, delay-level topic rewrite, transaction type.
"""

from __future__ import annotations

import enum
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from rocketstream import codec
from rocketstream.codec import HostAddress, MessageRecord
from rocketstream.errors import OptionError

# RocketMQ's topic validator: letters, digits, '%', '|', '_', '-'; at most 127 characters (V1 records).
_TOPIC_RE = re.compile(r"[%|a-zA-Z0-9_-]{1,127}")
DEFAULT_BORN_HOST = HostAddress("127.0.0.1", 0)


@dataclass
class Message:
    """A message as a producer sends it. ``properties`` are user properties; the store adds
    TAGS, KEYS, UNIQ_KEY (if absent), WAIT (if absent) and, for delayed messages, DELAY."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: str | list[str] | None = None
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    delay_level: int = 0
    born_timestamp: int | None = None
    born_host: HostAddress | None = None
    sys_flag: int = 0
    # RECONSUMETIMES of the record: set by a broker storing a retry (SendMessageProcessor.consumerSendMsgBack)
    reconsume_times: int = 0
    # Properties and body exactly as a broker received them (SendMessageProcessor): no WAIT or UNIQ_KEY
    # added, the body never compressed (the producer decides); a DELAY property still delays.
    as_sent: bool = False
    # A broker-made copy of a stored record (ScheduleMessageService.messageTimeup, the send-back copy): stored
    # as ``as_sent`` is, except that only ``delay_level`` delays it - a DELAY property is data. 4.9.8 encodes a
    # due message's properties string before it clears DELAY in the map, so the re-delivered record keeps
    # DELAY (and REAL_TOPIC/REAL_QID) but is not delayed again.
    broker_copy: bool = False
    # PREPARED TRANSACTION OFFSET of the record: the half message's commit-log offset on a committed
    # transactional message (EndTransactionProcessor: setPreparedTransactionOffset); 0 otherwise
    prepared_transaction_offset: int = 0
    # The properties string as 4.9.x's broker writes a map it built itself (MessageDecoder.messageProperties2String):
    # no separator after the last pair (the transaction records of broker/transaction.py)
    no_trailing_separator: bool = False


class PutMessageStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


class PutMessageResult:
    """What a put returns. ``msg_ids`` (UNIQ_KEYs) and ``offset_msg_ids`` are lists; a batch put may
    pass zero-argument callables instead, which build the lists on first access (a producer that
    never reads the ids of a 10,000-message batch does not pay for 20,000 strings)."""

    __slots__ = ("status", "_msg_ids", "_offset_msg_ids", "queue_offset", "physical_offset", "wrote_bytes",
                 "store_timestamp", "count", "reason")
    _FIELDS = ("status", "msg_ids", "offset_msg_ids", "queue_offset", "physical_offset", "wrote_bytes",
               "store_timestamp", "count", "reason")

    def __init__(self, status: PutMessageStatus, msg_ids: list[str] | Callable[[], list[str]] | None = None,
                 offset_msg_ids: list[str] | Callable[[], list[str]] | None = None, queue_offset: int = -1,
                 physical_offset: int = -1, wrote_bytes: int = 0, store_timestamp: int = 0, count: int = 0,
                 reason: str = "") -> None:
        self.status = status
        self._msg_ids = [] if msg_ids is None else msg_ids
        self._offset_msg_ids = [] if offset_msg_ids is None else offset_msg_ids
        self.queue_offset = queue_offset
        self.physical_offset = physical_offset
        self.wrote_bytes = wrote_bytes
        self.store_timestamp = store_timestamp
        self.count = count
        self.reason = reason  # why the put was refused (empty for PUT_OK)

    @property
    def msg_ids(self) -> list[str]:
        if callable(self._msg_ids):
            self._msg_ids = self._msg_ids()
        return self._msg_ids

    @msg_ids.setter
    def msg_ids(self, value: list[str]) -> None:
        self._msg_ids = value

    @property
    def offset_msg_ids(self) -> list[str]:
        if callable(self._offset_msg_ids):
            self._offset_msg_ids = self._offset_msg_ids()
        return self._offset_msg_ids

    @offset_msg_ids.setter
    def offset_msg_ids(self, value: list[str]) -> None:
        self._offset_msg_ids = value

    @property
    def ok(self) -> bool:
        return self.status is PutMessageStatus.PUT_OK

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self._FIELDS)

    def __eq__(self, other: object) -> bool:
        if type(other) is not PutMessageResult:
            return NotImplemented
        return self._values() == other._values()

    # no __hash__: defining __eq__ sets it to None (unhashable: mutable, like the dataclass it replaces)

    def __repr__(self) -> str:
        fields = zip(self._FIELDS, self._values(), strict=True)
        return "PutMessageResult(" + ", ".join(f"{k}={v!r}" for k, v in fields) + ")"


class GetMessageStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass
class GetMessageResult:
    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageRecord] = field(default_factory=list)


@dataclass
class RawMessageResult:
    """``getMessage`` for the wire: the stored record bytes of the messages found instead of decoded
    records - ``buffers``, views of the commit log whose concatenation in order is the records in queue
    order (adjacent records may share one view), ``message_count`` records, ``total_bytes`` bytes."""

    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    buffers: list[memoryview] = field(default_factory=list)
    total_bytes: int = 0
    message_count: int = 0


class IllegalMessage(Exception):
    """Internal: a message the store refuses; carries the put status to report."""

    def __init__(self, status: PutMessageStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(slots=True)
class PreparedMessage:
    """A message rewritten the way the broker stores it; ``size`` is its record TOTALSIZE."""

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str]
    props_bytes: bytes
    flag: int
    sys_flag: int
    born_timestamp: int
    born_host: HostAddress
    size: int
    uniq_key: str
    dispatch: bool  # False for PREPARED / ROLLBACK: stored with queue offset 0, no CQ unit
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0


def prepare(msg: Message, queue_id: int, *, store_host: HostAddress, compress_over: int | None,
            max_message_size: int, delay_levels: Sequence[int], batch: bool = False) -> PreparedMessage:
    """Apply the broker/producer rewrite rules; raise IllegalMessage for what the broker refuses."""
    topic = msg.topic
    if not isinstance(topic, str) or not valid_topic(topic):
        raise IllegalMessage(PutMessageStatus.MESSAGE_ILLEGAL,
                             f"topic {topic!r} must be 1-127 characters of [%|a-zA-Z0-9_-]")
    body = msg.body if type(msg.body) is bytes else bytes(msg.body)
    if len(body) > max_message_size:
        raise IllegalMessage(PutMessageStatus.MESSAGE_ILLEGAL,
                             f"body of {len(body)} bytes exceeds maxMessageSize {max_message_size}")
    if queue_id < 0 or queue_id >= 2**31:
        raise IllegalMessage(PutMessageStatus.MESSAGE_ILLEGAL, f"queue id {queue_id} out of range")
    sys_flag = msg.sys_flag
    # a producer may send a body it compressed itself (bit 0 plus the 5.x compression-type bits)
    allowed = codec.TRANSACTION_MASK | codec.FLAG_MULTI_TAGS | codec.FLAG_COMPRESSED | codec.COMPRESSION_TYPE_MASK
    if sys_flag & ~allowed:
        raise IllegalMessage(PutMessageStatus.MESSAGE_ILLEGAL,
                             f"sys_flag 0x{sys_flag:X}: only compression, transaction type and MULTI_TAGS bits "
                             "may be set")
    if sys_flag & codec.COMPRESSION_TYPE_MASK and not sys_flag & codec.FLAG_COMPRESSED:
        raise IllegalMessage(PutMessageStatus.MESSAGE_ILLEGAL,
                             f"sys_flag 0x{sys_flag:X}: a compression type without the COMPRESSED bit")
    if not 0 <= msg.reconsume_times < 2**31:
        raise IllegalMessage(PutMessageStatus.MESSAGE_ILLEGAL, f"reconsume_times {msg.reconsume_times} out of range")
    if not 0 <= msg.prepared_transaction_offset < 2**63:
        raise IllegalMessage(PutMessageStatus.MESSAGE_ILLEGAL,
                             f"prepared_transaction_offset {msg.prepared_transaction_offset} out of range")
    tran = sys_flag & codec.TRANSACTION_MASK
    props: dict[str, str] = dict(msg.properties)
    if msg.tags:
        props[codec.PROPERTY_TAGS] = msg.tags
    if msg.keys:
        props[codec.PROPERTY_KEYS] = msg.keys if isinstance(msg.keys, str) else " ".join(msg.keys)
    if msg.broker_copy:
        uniq = props.get(codec.PROPERTY_UNIQ_KEY) or ""
        delay = msg.delay_level
    elif msg.as_sent:
        uniq = props.get(codec.PROPERTY_UNIQ_KEY) or ""
        delay = msg.delay_level or _int_property(props, codec.PROPERTY_DELAY)
    else:
        props.setdefault(codec.PROPERTY_WAIT, "true")
        uniq = props.get(codec.PROPERTY_UNIQ_KEY) or codec.new_uniq_key()
        props[codec.PROPERTY_UNIQ_KEY] = uniq
        delay = msg.delay_level or _int_property(props, codec.PROPERTY_DELAY)
    if delay > 0 and tran in (codec.TRANSACTION_NOT_TYPE, codec.TRANSACTION_COMMIT):
        if batch:
            raise IllegalMessage(PutMessageStatus.MESSAGE_ILLEGAL, "batch messages cannot be delayed")
        delay = min(delay, len(delay_levels))
        props[codec.PROPERTY_DELAY] = str(delay)
        props[codec.PROPERTY_REAL_TOPIC] = topic
        props[codec.PROPERTY_REAL_QID] = str(queue_id)
        topic, queue_id = codec.SCHEDULE_TOPIC, delay - 1
    if batch and tran:
        raise IllegalMessage(PutMessageStatus.MESSAGE_ILLEGAL, "batch messages cannot be transactional")
    if not batch and not (msg.broker_copy or msg.as_sent) and compress_over is not None and len(body) >= compress_over \
            and not sys_flag & codec.FLAG_COMPRESSED:
        body, bits = codec.compress_body(body)
        sys_flag |= bits
    try:
        props_bytes = codec.encode_properties(props)
        if msg.no_trailing_separator:
            props_bytes = props_bytes[:-1]
    except OptionError as exc:
        raise IllegalMessage(PutMessageStatus.MESSAGE_ILLEGAL, str(exc)) from exc
    if len(props_bytes) > codec.MAX_PROPERTIES_LENGTH:
        raise IllegalMessage(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                             f"properties are {len(props_bytes)} bytes (> {codec.MAX_PROPERTIES_LENGTH})")
    if not -(2**31) <= msg.flag < 2**31:
        raise IllegalMessage(PutMessageStatus.MESSAGE_ILLEGAL, f"flag {msg.flag} is not an int32")
    born_host = HostAddress(*msg.born_host) if msg.born_host else DEFAULT_BORN_HOST
    born_ts = msg.born_timestamp if msg.born_timestamp is not None else time.time_ns() // 1_000_000
    size = codec.record_size(len(body), len(topic), len(props_bytes), born_v6=born_host.is_v6,
                           store_v6=store_host.is_v6)
    return PreparedMessage(topic, queue_id, body, props, props_bytes, msg.flag, sys_flag, born_ts, born_host,
                           size, uniq, tran in (codec.TRANSACTION_NOT_TYPE, codec.TRANSACTION_COMMIT),
                           msg.reconsume_times, msg.prepared_transaction_offset)


@lru_cache(maxsize=4096)
def valid_topic(topic: str) -> bool:
    return _TOPIC_RE.fullmatch(topic) is not None


def _int_property(props: Mapping[str, str], name: str) -> int:
    raw = props.get(name)
    if raw is None:
        return 0
    try:
        return int(raw)
    except ValueError:
        raise IllegalMessage(PutMessageStatus.MESSAGE_ILLEGAL, f"property {name}={raw!r} is not an integer") from None
