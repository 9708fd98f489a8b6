"""The client's data types and RocketMQ's client-side validation rules.

* :class:`MessageQueue` — the one queue type of the client (``allocate.MessageQueue``, ordered like Java's
  ``MessageQueue.compareTo``), re-exported here.
* :class:`Message` — what a producer sends (``org.apache.rocketmq.common.message.Message``).
* :class:`MessageExt` — a received message, every ``MessageExt`` field (``MessageDecoder.decode`` on the
  client: body decompressed, offsetMsgId computed, ``msgId`` = UNIQ_KEY else offsetMsgId).
* :class:`SendStatus`, :class:`SendResult`, :class:`PullStatus`, :class:`PullResult`.
* Validation (``org.apache.rocketmq.client.Validators`` 4.9.8): :func:`check_topic`, :func:`check_group`,
  :func:`check_message`; errors are :class:`OptionError` naming the argument.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rocketstream.client.allocate import MessageQueue
from rocketstream.codec import (
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    HostAddress,
    MessageRecord,
    decode_properties,
    offset_msg_id,
)
from rocketstream.errors import OptionError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "MessageQueue", "Message", "MessageExt", "SendStatus", "SendResult", "PullStatus", "PullResult",
    "check_topic", "check_group", "check_message", "NOT_ALLOWED_SEND_TOPICS", "VALID_PATTERN",
    "TOPIC_MAX_LENGTH", "CHARACTER_MAX_LENGTH", "DEFAULT_MAX_MESSAGE_SIZE", "KEY_SEPARATOR",
    "PROPERTY_MIN_OFFSET", "PROPERTY_MAX_OFFSET", "PROPERTY_RETRY_TOPIC", "PROPERTY_ORIGIN_MESSAGE_ID",
    "PROPERTY_RECONSUME_TIME", "PROPERTY_MAX_RECONSUME_TIMES", "PROPERTY_TRAN_MSG", "PROPERTY_SHARDING_KEY",
    "CLIENT_INNER_PRODUCER_GROUP", "DEFAULT_PRODUCER_GROUP", "AUTO_CREATE_TOPIC_KEY", "RETRY_GROUP_TOPIC_PREFIX",
    "DLQ_GROUP_TOPIC_PREFIX",
]

# --- Validators / TopicValidator / MixAll constants (4.9.8)
VALID_PATTERN = re.compile(r"[%|a-zA-Z0-9_-]+")   # Validators.VALID_PATTERN_STR "^[%|a-zA-Z0-9_-]+$"
CHARACTER_MAX_LENGTH = 255                          # Validators.CHARACTER_MAX_LENGTH (groups)
TOPIC_MAX_LENGTH = 127                              # Validators.TOPIC_MAX_LENGTH
DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024          # DefaultMQProducer.maxMessageSize
MAX_PROPERTIES_LENGTH = 32767                       # MessageDecoder / CommitLog properties length field
KEY_SEPARATOR = " "                                 # MessageConst.KEY_SEPARATOR
AUTO_CREATE_TOPIC_KEY = "TBW102"                    # TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC
CLIENT_INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"   # MixAll.CLIENT_INNER_PRODUCER_GROUP
DEFAULT_PRODUCER_GROUP = "DEFAULT_PRODUCER"         # MixAll.DEFAULT_PRODUCER_GROUP
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
# TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET
NOT_ALLOWED_SEND_TOPICS = frozenset({
    "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
})

# MessageConst names the client sets or reads
PROPERTY_MIN_OFFSET = "MIN_OFFSET"
PROPERTY_MAX_OFFSET = "MAX_OFFSET"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_TRAN_MSG = "TRAN_MSG"
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"


def check_topic(topic: object, *, argument: str = "topic") -> str:
    """``Validators.checkTopic``: not blank, at most 127 characters, only ``[%|a-zA-Z0-9_-]``."""
    if not isinstance(topic, str) or not topic.strip():
        raise OptionError(argument, "the specified topic is blank", topic)
    if len(topic) > TOPIC_MAX_LENGTH:
        raise OptionError(argument, f"the specified topic is longer than topic max length {TOPIC_MAX_LENGTH}",
                          topic)
    if not VALID_PATTERN.fullmatch(topic):
        raise OptionError(argument, f"the specified topic contains illegal characters, allowing only "
                                    f"^{VALID_PATTERN.pattern}$", topic)
    return topic


def check_group(group: object, *, argument: str = "group") -> str:
    """``Validators.checkGroup``: not blank, at most 255 characters, only ``[%|a-zA-Z0-9_-]``."""
    if not isinstance(group, str) or not group.strip():
        raise OptionError(argument, "the specified group is blank", group)
    if len(group) > CHARACTER_MAX_LENGTH:
        raise OptionError(argument, f"the specified group is longer than group max length {CHARACTER_MAX_LENGTH}",
                          group)
    if not VALID_PATTERN.fullmatch(group):
        raise OptionError(argument, f"the specified group contains illegal characters, allowing only "
                                    f"^{VALID_PATTERN.pattern}$", group)
    return group


@dataclass(slots=True)
class Message:
    """A message to send (``Message``): ``keys`` may be one string (space-separated keys) or several;
    ``properties`` are user properties; ``tags``, ``keys``, ``delay_level`` and ``wait_store_msg_ok``
    become the TAGS / KEYS / DELAY / WAIT properties on the wire."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: str | Iterable[str] | None = None
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    delay_level: int = 0
    wait_store_msg_ok: bool = True

    @property
    def keys_text(self) -> str | None:
        if self.keys is None:
            return None
        if isinstance(self.keys, str):
            return self.keys or None
        text = KEY_SEPARATOR.join(self.keys)   # Message.setKeys(Collection): joined with " "
        return text or None

    def wire_properties(self) -> dict[str, str]:
        """The properties map as the Java client builds it: user properties plus TAGS, KEYS, WAIT, DELAY
        (``Message(topic, tags, keys, flag, body, waitStoreMsgOK)``, ``setDelayTimeLevel``)."""
        props = dict(self.properties)
        if self.tags:
            props[PROPERTY_TAGS] = self.tags
        keys = self.keys_text
        if keys:
            props[PROPERTY_KEYS] = keys
        props[PROPERTY_WAIT] = "true" if self.wait_store_msg_ok else "false"
        if self.delay_level > 0:
            props[PROPERTY_DELAY] = str(self.delay_level)
        return props


def check_message(msg: Message, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE, *,
                  topic_checked: bool = False) -> None:
    """``Validators.checkMessage``: topic valid and not a system topic, body not empty and not over
    ``max_message_size``; plus what the broker would refuse with 13 (delay level, properties length).
    ``topic_checked``: the caller has checked this very topic already (a batch's messages)."""
    if not topic_checked:
        check_topic(msg.topic)
        if msg.topic in NOT_ALLOWED_SEND_TOPICS:
            raise OptionError("topic", "sending message to this topic is forbidden", msg.topic)
    if not isinstance(msg.body, (bytes, bytearray, memoryview)):
        raise OptionError("body", f"the message body must be bytes, not {type(msg.body).__name__}")
    if len(msg.body) == 0:
        raise OptionError("body", "the message body length is zero")
    if len(msg.body) > max_message_size:
        raise OptionError("body", f"the message body size {len(msg.body)} is over the max value "
                                  f"{max_message_size}")
    if not isinstance(msg.delay_level, int) or msg.delay_level < 0:
        raise OptionError("delay_level", "must be an int >= 0", msg.delay_level)
    if not isinstance(msg.flag, int) or not -(2**31) <= msg.flag < 2**31:
        raise OptionError("flag", "must be an int32", msg.flag)
    for k, v in msg.properties.items():
        if not isinstance(k, str) or not isinstance(v, str) or not k or not v:
            raise OptionError("properties", "names and values must be non-empty strings", {k: v})


class SendStatus(enum.Enum):
    """``SendStatus``; the last three come from response codes 10/11/12, still stored."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass(slots=True, frozen=True)
class SendResult:
    """``SendResult``: ``msg_id`` is the client UNIQ_KEY (comma-joined for a batch), ``offset_msg_id``
    the broker's id (comma-joined for a batch), ``queue_offset`` the first message's queue offset."""

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    region_id: str | None = None
    trace_on: bool = False


class PullStatus(enum.Enum):
    FOUND = "FOUND"                    # 0
    NO_NEW_MSG = "NO_NEW_MSG"          # 19 PULL_NOT_FOUND
    NO_MATCHED_MSG = "NO_MATCHED_MSG"  # 20 PULL_RETRY_IMMEDIATELY
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"  # 21 PULL_OFFSET_MOVED


@dataclass(slots=True)
class PullResult:
    """``PullResultExt``: the response header plus the raw body (concatenated stored records);
    ``messages`` is filled by :func:`rocketstream.client.api.process_pull_result`."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    suggest_which_broker_id: int = 0
    body: bytes | None = None
    messages: list[MessageExt] = field(default_factory=list)
    # the body left in its receive buffer (MQClientAPI.pull(..., body_buffer=True) of a large answer):
    # then ``body`` is None
    body_buffer: npt.NDArray[np.uint8] | None = None


_MESSAGE_EXT_FIELDS = ("topic", "body", "properties", "flag", "queue_id", "queue_offset", "commit_log_offset",
                       "sys_flag", "born_timestamp", "born_host", "store_timestamp", "store_host", "reconsume_times",
                       "prepared_transaction_offset", "body_crc", "store_size", "broker_name")


# the MessageExt fields a pull decoder may leave to be filled on first read (MessageExt's docstring)
LAZY_FIELDS = ("flag", "queue_id", "commit_log_offset", "sys_flag", "born_timestamp", "born_host", "store_timestamp",
               "store_host", "reconsume_times", "prepared_transaction_offset", "body_crc", "store_size", "broker_name")
_LAZY_FIELD_SET = frozenset(LAZY_FIELDS)


class MessageExt:
    """A received message (``MessageExt`` / ``MessageClientExt``): body decompressed; ``store_size`` is the
    record's TOTALSIZE; ``commit_log_offset`` its PHYSICALOFFSET; ``broker_name`` set by the puller.

    ``properties`` may be given as the record's encoded PROPERTIES bytes: they are decoded
    (``MessageDecoder.string2messageProperties``, :func:`rocketstream.codec.decode_properties`) on the
    first access of :attr:`properties`; :meth:`put_property` before that only records the value. A consumer
    that never looks at the properties never pays for them. Compares equal field by field (properties
    decoded).

    A pull decoder (:mod:`rocketstream.client.pull_decode`) may also make a message with only ``topic``,
    ``body``, ``queue_offset``, ``_raw_props``, ``_props`` (None) and ``_pending`` set, and ``_src`` =
    ``(fill, record)``: the other fields (:data:`LAZY_FIELDS`) are ``fill(record)``'s values, in that order,
    set on the first read of any of them (a field assigned before keeps its value). Every field reads the same
    as if the constructor had been given it; the consume path (ProcessQueue, CONSUME_START_TIME, the retry
    topic check) reads only the eager ones."""

    __slots__ = ("topic", "body", "_props", "_raw_props", "_pending", "flag", "queue_id", "queue_offset",
                 "commit_log_offset", "sys_flag", "born_timestamp", "born_host", "store_timestamp", "store_host",
                 "reconsume_times", "prepared_transaction_offset", "body_crc", "store_size", "broker_name", "_src")

    def __init__(self, topic: str, body: bytes, properties: dict[str, str] | bytes, flag: int, queue_id: int,
                 queue_offset: int, commit_log_offset: int, sys_flag: int, born_timestamp: int,
                 born_host: HostAddress, store_timestamp: int, store_host: HostAddress, reconsume_times: int,
                 prepared_transaction_offset: int, body_crc: int, store_size: int, broker_name: str = "") -> None:
        self.topic = topic
        self.body = body
        if type(properties) is bytes:
            self._props: dict[str, str] | None = None
            self._raw_props: bytes | None = properties
        else:
            self._props = properties   # type: ignore[assignment]   # a dict (or a Mapping the caller owns)
            self._raw_props = None
        self._pending: tuple[tuple[str, str], ...] | None = None
        self.flag = flag
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.commit_log_offset = commit_log_offset
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.store_timestamp = store_timestamp
        self.store_host = store_host
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset
        self.body_crc = body_crc
        self.store_size = store_size
        self.broker_name = broker_name
        self._src: tuple[Callable[..., tuple[object, ...]], object] | None = None

    if not TYPE_CHECKING:   # (hidden from mypy: a class with __getattr__ would accept any attribute name)
        def __getattr__(self, name: str) -> object:
            """A lazy field not read yet (the class docstring): every unset one of them from ``_src``."""
            if name in _LAZY_FIELD_SET:
                get = object.__getattribute__
                src = self._src
                if src is not None:
                    # every field set before _src is cleared: another thread that finds _src cleared finds
                    # the fields set (a message may be read from the consume thread and the client loop)
                    for field_name, value in zip(LAZY_FIELDS, src[0](src[1]), strict=True):
                        try:
                            get(self, field_name)   # assigned since: kept
                        except AttributeError:
                            setattr(self, field_name, value)
                    self._src = None
                    return get(self, name)
                try:   # filled by another thread between this lookup and the _src read
                    return get(self, name)
                except AttributeError:
                    pass
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}", name=name, obj=self)

    @property
    def properties(self) -> dict[str, str]:
        props = self._props
        if props is None:
            raw = self._raw_props
            props = decode_properties(raw) if raw else {}
            if self._pending is not None:
                for k, v in self._pending:
                    props[k] = v
                self._pending = None
            self._props = props
            self._raw_props = None
        return props

    @properties.setter
    def properties(self, value: dict[str, str]) -> None:
        self._props = value
        self._raw_props = None
        self._pending = None

    def get_property(self, name: str) -> str | None:
        """``getProperty``; a value put since the last decode is found without decoding the rest."""
        if self._props is None and self._pending is not None:
            for k, v in reversed(self._pending):
                if k == name:
                    return v
        return self.properties.get(name)

    def put_property(self, name: str, value: str) -> None:
        """``MessageAccessor.putProperty``: without decoding properties not decoded yet."""
        self.put_properties(((name, value),))

    def put_properties(self, pairs: tuple[tuple[str, str], ...]) -> None:
        """:meth:`put_property` for each pair, in order (``pairs`` may be shared by many messages)."""
        props = self._props
        if props is not None:
            props.update(pairs)
        elif self._pending is None:
            self._pending = pairs
        else:
            self._pending += pairs

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)

    @property
    def offset_msg_id(self) -> str:
        return offset_msg_id(self.store_host, self.commit_log_offset)

    @property
    def msg_id(self) -> str:
        """``MessageClientExt.getMsgId``: UNIQ_KEY when present, else the offset message id."""
        return self.properties.get(PROPERTY_UNIQ_KEY) or self.offset_msg_id

    @property
    def delay_level(self) -> int:
        raw = self.properties.get(PROPERTY_DELAY)
        return int(raw) if raw and raw.lstrip("-").isdigit() else 0

    @property
    def queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)

    def _astuple(self) -> tuple[object, ...]:
        return tuple(getattr(self, f) for f in _MESSAGE_EXT_FIELDS)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, MessageExt)
        return self._astuple() == other._astuple()

    __hash__ = None   # type: ignore[assignment]   # mutable, compared by value

    def __repr__(self) -> str:
        return "MessageExt(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in _MESSAGE_EXT_FIELDS) + ")"

    @classmethod
    def from_record(cls, rec: MessageRecord, body: bytes, broker_name: str = "") -> MessageExt:
        return cls(rec.topic, body, rec.properties, rec.flag, rec.queue_id, rec.queue_offset, rec.physical_offset,
                   rec.sys_flag, rec.born_timestamp, rec.born_host, rec.store_timestamp, rec.store_host,
                   rec.reconsume_times, rec.prepared_transaction_offset, rec.body_crc, rec.total_size, broker_name)

