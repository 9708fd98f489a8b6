"""``DefaultMQProducer`` / ``DefaultMQProducerImpl``: synchronous sends over the client instance's loop.

``send`` follows ``sendDefaultImpl``: validate (``Validators.checkMessage``), set UNIQ_KEY
(``MessageClientIDSetter``; codec's generator has the same layout), compress bodies of at least
``compress_msg_body_over_howmuch`` bytes with zlib (sysFlag ``0x301`` = COMPRESSED | ZLIB << 8, what the
real 4.9.8 producer stores), find the topic's publish info (the name server's route, else the
``create_topic_key`` (TBW102) route with ``default_topic_queue_nums`` queues so that the broker
auto-creates the topic), pick queues round-robin (latency fault tolerance off, as by default) and try
``1 + retry_times_when_send_failed`` times, on another broker after a failure, for remoting errors and the
codes of ``retryResponseCodes``; the whole send must fit in ``send_msg_timeout``. Sends to a chosen queue
(``queue=``, ``selector=``, ``sharding_key=``) are tried once, as ``sendSelectImpl`` / ``send(msg, mq)`` do.

Once the topic's route and the broker's (heartbeat) connection are known, a send's first attempt is made from
the caller's thread: over plain TCP on a connection of its own from the client's
:class:`~rocketstream.remoting.blocking.BlockingPool`, the thread reading the answer itself
(``MQClientAPI.invoke_from_thread``); with TLS over the event loop's connection. Retries, and everything
before the route is known, run on the event loop.
"""

from __future__ import annotations

import dataclasses
import logging
import struct
import time
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any

from rocketstream.client.api import RETRY_RESPONSE_CODES, MQClientAPI, properties_string
from rocketstream.client.common import (
    AUTO_CREATE_TOPIC_KEY,
    DEFAULT_MAX_MESSAGE_SIZE,
    DEFAULT_PRODUCER_GROUP,
    MAX_PROPERTIES_LENGTH,
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_GROUP_TOPIC_PREFIX,
    Message,
    MessageQueue,
    SendResult,
    SendStatus,
    check_group,
    check_message,
    check_topic,
)
from rocketstream.client.credentials import Credentials
from rocketstream.client.instance import MQClientInstance
from rocketstream.client.namespace import check_namespace, unwrap, wrap
from rocketstream.client.route import TopicPublishInfo
from rocketstream.client.tls import TlsConfig, tls_config
from rocketstream.codec import (
    PROPERTY_DELAY,
    PROPERTY_TRAN_MSG,
    PROPERTY_UNIQ_KEY,
    TRANSACTION_PREPARED,
    compress_body,
    java_hash,
    new_uniq_key,
)
from rocketstream.codec.ids import new_uniq_keys
from rocketstream.errors import (
    BrokerResponseError,
    MQClientError,
    OptionError,
    RemotingError,
    RemotingTimeoutError,
    SendFailedError,
)
from rocketstream.remoting import RemotingCommand, RequestCode
from rocketstream.remoting.channel import next_opaque
from rocketstream.remoting.command import RequestTemplate

__all__ = ["Producer", "select_by_hash", "MessageQueueSelector"]

log = logging.getLogger("rocketstream.client")

MessageQueueSelector = Callable[[list[MessageQueue], Message, Any], MessageQueue]
COMPRESS_LEVEL = 5   # rocketmq.message.compressLevel default


def select_by_hash(mqs: list[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    """``SelectMessageQueueByHash``: ``abs(arg.hashCode() % size)`` (Java hash for strings)."""
    h = java_hash(arg) if isinstance(arg, str) else hash(arg)
    value = abs(int(_java_rem(h, len(mqs))))
    return mqs[value]


def _properties_chars(props: dict[str, str]) -> int:
    """``sum(len(k) + len(v) + 2)`` over the properties (what messageProperties2String writes, in chars)."""
    return sum(map(len, props)) + sum(map(len, props.values())) + 2 * len(props) if props else 0


_INT32 = 2**31
_UNIQ_TAIL = f"\x02{PROPERTY_UNIQ_KEY}\x01"   # messageProperties2String's separators around UNIQ_KEY's name
_BATCH_HEAD = struct.Struct(">iiiii")      # MessageDecoder.encodeMessage: TOTALSIZE, MAGICCODE 0, BODYCRC 0, FLAG,
_PROPS_LEN = struct.Struct(">h")           # BODY length | body | PROPERTIES length (short) | properties


def _uniq_head(cache: dict[tuple[str | None, str | None, bool, int], str], msg: Message) -> str | None:
    """What ``properties_string`` writes for the wire properties of ``msg`` up to its UNIQ_KEY's value, for a
    message without user properties, made once per distinct (tags, keys, WAIT, delay level) in ``cache``
    (emptied past 256: a producer of ever new tags or keys); None for any other message."""
    tags, keys, delay = msg.tags, msg.keys, msg.delay_level
    if msg.properties or not (tags is None or type(tags) is str) or not (keys is None or type(keys) is str) \
            or type(delay) is not int:
        return None
    sig = (tags, keys, bool(msg.wait_store_msg_ok), delay)
    head = cache.get(sig)
    if head is None:
        if len(cache) >= 256:
            cache.clear()
        head = cache[sig] = properties_string(msg.wire_properties()) + _UNIQ_TAIL
    return head


_NOTHING = object()
_NOT_KEPT: Any = object()
_SEND_MESSAGE_V2 = RequestCode.SEND_MESSAGE_V2


def _encode_batch(msgs: Sequence[Message], uniq_keys: Sequence[str]) -> tuple[bytes, str, int]:
    """``MessageBatch.generateFromList`` + ``encode()`` in one pass: the SEND_BATCH_MESSAGE body
    (``MessageDecoder.encodeMessages``: each message's wire properties with a UNIQ_KEY from ``uniq_keys``
    unless it has one), the UNIQ_KEYs comma-joined (the send result's msgId) and the batch's size as
    :meth:`Producer.send_batch` checks it against ``max_message_size``. Byte for byte
    ``encode_batch_body([(flag, body, properties_string(props))])``; a message without user properties
    costs one string concatenation: the properties text before its UNIQ_KEY is made once per distinct
    (tags, keys, WAIT)."""
    parts: list[bytes] = []
    uniqs: list[str] = []
    heads: dict[tuple[str | None, str | None, bool, int], str] = {}
    size = 0
    pack_head, pack_len = _BATCH_HEAD.pack, _PROPS_LEN.pack
    # the previous message's (tags, keys, delay level, WAIT) objects and what was made of them: a batch's
    # messages mostly share them, so the head (and, with the body's length and flag, the fixed fields before the
    # body and the properties' length) is taken again without _uniq_head's checks
    p_tags: object = _NOTHING
    p_keys: object = _NOTHING
    p_delay: object = _NOTHING
    p_wait: object = _NOTHING
    p_head, p_head_b = "", b""
    p_fixed: tuple[tuple[int, int, int], bytes, bytes] = ((-1, 0, 0), b"", b"")   # (body length, flag,
    # properties length) -> the fields before the body, packed, and the properties' length, packed
    for m, key in zip(msgs, uniq_keys, strict=True):
        if m.tags is p_tags and m.keys is p_keys and m.delay_level is p_delay and m.wait_store_msg_ok is p_wait \
                and not m.properties:
            head_b = p_head_b
        else:
            head = _uniq_head(heads, m)
            if head is not None:
                p_tags, p_keys, p_delay, p_wait = m.tags, m.keys, m.delay_level, m.wait_store_msg_ok
                p_head, p_head_b = head, head.encode("utf-8")
                head_b = p_head_b
            else:
                p_tags = _NOTHING
                props = m.wire_properties()
                if PROPERTY_UNIQ_KEY not in props:
                    props[PROPERTY_UNIQ_KEY] = key
                key = props[PROPERTY_UNIQ_KEY]
                head_b = b""
                text = properties_string(props)
        if head_b:
            raw = head_b + key.encode("utf-8")
            n_text = len(p_head) + len(key)
        else:
            raw = text.encode("utf-8")
            n_text = len(text)
        n_raw = len(raw)
        if n_raw >= MAX_PROPERTIES_LENGTH:   # (the text has at most as many chars as bytes)
            if n_text + 1 > MAX_PROPERTIES_LENGTH:   # as _wire: the properties' chars with every separator
                raise OptionError("properties", "the encoded properties exceed 32767 bytes")
            if n_raw > MAX_PROPERTIES_LENGTH:
                raise OptionError("properties", f"encoded length {n_raw} exceeds {MAX_PROPERTIES_LENGTH}")
        body = m.body if type(m.body) is bytes else bytes(m.body)
        n_body = len(body)
        flag = m.flag
        if (n_body, flag, n_raw) == p_fixed[0]:
            fixed, raw_len = p_fixed[1], p_fixed[2]
        else:
            fixed, raw_len = pack_head(22 + n_body + n_raw, 0, 0, flag, n_body), pack_len(n_raw)
            p_fixed = ((n_body, flag, n_raw), fixed, raw_len)
        parts += (fixed, body, raw_len, raw)
        uniqs.append(key)
        size += n_body + n_text
    return b"".join(parts), ",".join(uniqs), size + 23 * len(uniqs)   # 20 + 2 + the last separator each


def _request_frame(api: MQClientAPI, built: tuple[RemotingCommand, str]) -> tuple[int, int, bytes, str]:
    """(opaque, code, frame, UNIQ_KEY(s)) of a request of ``MQClientAPI.send_request`` / ``send_batch_request``
    (:meth:`MQClientAPI.thread_frame`), as :meth:`Producer._send_from_thread` sends it."""
    request, uniq = built
    opaque, frame = api.thread_frame(request)
    return opaque, request.code, frame, uniq


def _java_rem(a: int, b: int) -> int:
    """Java's ``%`` (sign of the dividend)."""
    r = abs(a) % b
    return -r if a < 0 else r


class Producer:
    """``Producer(group, namesrv=...)``; ``start()`` before sending, ``shutdown()`` (or ``with``) after.
    ``credentials``: sign every request for a cluster with ACL on (``AclClientRPCHook``). A refusal by the
    broker's ACL is SYSTEM_ERROR, which ``retryResponseCodes`` retries as Java does: the send fails with
    SendFailedError after its attempts, the broker's answer (BrokerResponseError) as ``__cause__``.
    ``namespace`` (``ClientConfig.namespace``): the group and every topic are ``namespace%name`` on the broker
    (``DefaultMQProducer.withNamespace``); ``self.group`` is the group as the broker knows it; send results,
    and the queues a selector is given, show topics without the namespace (``parsePublishMessageQueues``,
    ``MQClientAPIImpl.processSendResponse``).
    ``tls``: a :class:`~rocketstream.client.tls.TlsConfig` or True: every connection is TLS."""

    def __init__(self, group: str, *, namesrv: str, instance_name: str = "DEFAULT", send_msg_timeout: float = 3.0,
                 retry_times_when_send_failed: int = 2, compress_msg_body_over_howmuch: int = 4096,
                 max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE, default_topic_queue_nums: int = 4,
                 create_topic_key: str = AUTO_CREATE_TOPIC_KEY, compress_level: int = COMPRESS_LEVEL,
                 credentials: Credentials | None = None, namespace: str | None = None,
                 tls: TlsConfig | bool | None = None) -> None:
        check_group(group)
        namespace = check_namespace(namespace)
        tls = tls_config(tls)
        if credentials is not None and not isinstance(credentials, Credentials):
            raise OptionError("credentials", "must be a rocketstream.client.Credentials or None, not "
                              + type(credentials).__name__)
        if group == DEFAULT_PRODUCER_GROUP:
            raise OptionError("group", f"producerGroup can not equal {DEFAULT_PRODUCER_GROUP}, please specify "
                                       "another one", group)
        if not isinstance(namesrv, str) or not namesrv.strip():
            raise OptionError("namesrv", "a name server address 'host:port' is required", namesrv)
        for name, value, low in (("send_msg_timeout", send_msg_timeout, 0.0), ("max_message_size", max_message_size, 1),
                                 ("retry_times_when_send_failed", retry_times_when_send_failed, 0),
                                 ("compress_msg_body_over_howmuch", compress_msg_body_over_howmuch, 0),
                                 ("default_topic_queue_nums", default_topic_queue_nums, 1)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < low or \
                    (name == "send_msg_timeout" and value == 0):
                raise OptionError(name, f"must be a number > {low}" if name == "send_msg_timeout"
                                  else f"must be a number >= {low}", value)
        check_topic(create_topic_key, argument="create_topic_key")
        self.namespace = namespace
        self.group = wrap(namespace, group)   # DefaultMQProducer.start: setProducerGroup(withNamespace(...))
        self.namesrv = namesrv
        self.instance_name = instance_name
        self.send_msg_timeout = float(send_msg_timeout)
        self.retry_times_when_send_failed = int(retry_times_when_send_failed)
        self.compress_msg_body_over_howmuch = int(compress_msg_body_over_howmuch)
        self.compress_level = compress_level
        self.max_message_size = int(max_message_size)
        self.default_topic_queue_nums = int(default_topic_queue_nums)
        self.create_topic_key = create_topic_key
        self.credentials = credentials
        self.tls = tls
        self._publish: dict[str, TopicPublishInfo] = {}
        self._instance: MQClientInstance | None = None
        self._heads: dict[tuple[str | None, str | None, bool, int], str] = {}   # _wire_text's
        # _send_plain's: topic -> (its name on the broker, its request template), None: the general path
        self._plain: dict[str, tuple[str, RequestTemplate] | None] = {}

    # ------------------------------------------------------------------------- lifecycle
    def start(self) -> Producer:
        if self._instance is not None:
            raise MQClientError(f"producer {self.group} is already started")
        inst = MQClientInstance.get(self.namesrv, self.instance_name, credentials=self.credentials, tls=self.tls)
        inst.register_producer(self.group, self)
        self._publish[self.create_topic_key] = TopicPublishInfo(self.create_topic_key, [])
        try:
            inst.start()
        except BaseException:
            with inst._lock:
                inst.producers.pop(self.group, None)
            raise
        self._instance = inst
        return self

    def shutdown(self) -> None:
        inst, self._instance = self._instance, None
        if inst is None:
            return
        try:
            inst.run(inst.unregister_producer(self.group), 10.0)
        except (RemotingError, MQClientError) as exc:
            log.warning("producer %s: unregister failed: %s", self.group, exc)
        finally:
            inst.shutdown()

    def __enter__(self) -> Producer:
        return self.start() if self._instance is None else self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.shutdown()

    @property
    def instance(self) -> MQClientInstance:
        if self._instance is None:
            raise MQClientError(f"producer {self.group} is not started (call start())")
        return self._instance

    # ProducerLike (called on the loop by MQClientInstance)
    def publish_topics(self) -> set[str]:
        return set(self._publish)

    def update_topic_publish_info(self, topic: str, info: TopicPublishInfo) -> None:
        if topic in self._publish:
            self._publish[topic] = info

    # ------------------------------------------------------------------------- namespace
    def _wrap_message(self, msg: Message) -> Message:
        """``msg.setTopic(withNamespace(msg.getTopic()))`` on a copy: the caller's message keeps its topic."""
        topic = wrap(self.namespace, msg.topic)
        return msg if topic == msg.topic else dataclasses.replace(msg, topic=topic)

    def _wrap_queue(self, mq: MessageQueue) -> MessageQueue:
        """``queueWithNamespace``."""
        topic = wrap(self.namespace, mq.topic)
        return mq if topic == mq.topic else MessageQueue(topic, mq.broker_name, mq.queue_id)

    def _unwrap_queue(self, mq: MessageQueue) -> MessageQueue:
        topic = unwrap(self.namespace, mq.topic)
        return mq if topic == mq.topic else MessageQueue(topic, mq.broker_name, mq.queue_id)

    def _user_result(self, result: SendResult) -> SendResult:
        """The send result as the user sees it: its queue's topic without the namespace."""
        if not self.namespace:
            return result
        return dataclasses.replace(result, queue=self._unwrap_queue(result.queue))

    # ------------------------------------------------------------------------- building messages
    @staticmethod
    def _as_message(topic_or_msg: str | Message, body: bytes | None, tags: str | None,
                    keys: str | Iterable[str] | None, properties: dict[str, str] | None,
                    delay_level: int, flag: int) -> Message:
        if isinstance(topic_or_msg, Message):
            if body is not None or tags is not None or keys is not None or properties or delay_level or flag:
                raise OptionError("body", "pass either a Message or topic + body and fields, not both")
            return topic_or_msg
        if body is None:
            raise OptionError("body", "the message body is null")
        if isinstance(body, str):
            raise OptionError("body", "must be bytes (encode the text first)", body[:40])
        return Message(topic_or_msg, bytes(body), tags=tags, keys=keys, properties=dict(properties or {}),
                       flag=flag, delay_level=delay_level)

    def _wire(self, msg: Message, *, compress: bool, uniq_key: str | None = None) -> tuple[bytes, int, dict[str, str]]:
        props = msg.wire_properties()
        if PROPERTY_UNIQ_KEY not in props:
            props[PROPERTY_UNIQ_KEY] = uniq_key or new_uniq_key()
        body = bytes(msg.body)
        sys_flag = 0
        if compress and len(body) >= self.compress_msg_body_over_howmuch:   # tryToCompressMessage
            body, sys_flag = compress_body(body, self.compress_level)
        if props.get(PROPERTY_TRAN_MSG, "").lower() == "true":   # sendKernelImpl: a half message
            sys_flag |= TRANSACTION_PREPARED
        if _properties_chars(props) > 32767:
            raise OptionError("properties", "the encoded properties exceed 32767 bytes")
        return body, sys_flag, props

    def _wire_text(self, msg: Message) -> tuple[bytes, int, str, str] | None:
        """:meth:`_wire` for a message without user properties (nor a retry topic's header fields): the body,
        sysFlag, the properties as ``properties_string`` writes them and the UNIQ_KEY set, the text before the
        UNIQ_KEY made once per distinct (tags, keys, WAIT, delay level). None for any other message."""
        if msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return None
        head = _uniq_head(self._heads, msg)
        if head is None:
            return None
        uniq = new_uniq_key()
        text = head + uniq
        if len(text) + 1 > MAX_PROPERTIES_LENGTH:   # _properties_chars: every pair with both separators
            raise OptionError("properties", "the encoded properties exceed 32767 bytes")
        body = bytes(msg.body)
        sys_flag = 0
        if len(body) >= self.compress_msg_body_over_howmuch:   # tryToCompressMessage
            body, sys_flag = compress_body(body, self.compress_level)
        return body, sys_flag, text, uniq

    # ------------------------------------------------------------------------- send
    def send(self, topic_or_msg: str | Message, body: bytes | None = None, *, tags: str | None = None,
             keys: str | Iterable[str] | None = None, properties: dict[str, str] | None = None,
             delay_level: int = 0, flag: int = 0, queue: MessageQueue | None = None,
             selector: MessageQueueSelector | None = None, arg: Any = None, sharding_key: str | None = None,
             timeout: float | None = None) -> SendResult:
        """Send one message synchronously; ``queue`` / ``selector`` (+ ``arg``) / ``sharding_key`` choose the
        queue (ordered messages), else round robin with retries on another broker."""
        if type(topic_or_msg) is str and type(body) is bytes and not properties and type(delay_level) is int \
                and not delay_level and type(flag) is int and not flag and queue is None and selector is None \
                and sharding_key is None and (tags is None or type(tags) is str) \
                and (keys is None or type(keys) is str):
            result = self._send_plain(topic_or_msg, body, tags, keys, timeout)
            if result is not None:
                return result
        msg = self._as_message(topic_or_msg, body, tags, keys, properties, delay_level, flag)
        check_message(msg, self.max_message_size)
        chosen = [x for x in (queue, selector, sharding_key) if x is not None]
        if len(chosen) > 1:
            raise OptionError("queue", "give at most one of queue, selector and sharding_key")
        if queue is not None and queue.topic != msg.topic:
            raise OptionError("queue", f"message's topic {msg.topic} not equal mq's topic {queue.topic}")
        if sharding_key is not None:
            selector, arg = select_by_hash, sharding_key
        if self.namespace:
            user_msg, msg = msg, self._wrap_message(msg)
            check_topic(msg.topic)   # the topic the broker sees (Validators.checkMessage after withNamespace)
            if queue is not None:
                queue = self._wrap_queue(queue)
            if selector is not None:
                selector = self._user_selector(selector, user_msg)
        t = self.send_msg_timeout if timeout is None else timeout
        inst = self.instance
        if queue is None and selector is None:
            text = uniq = None
            props: dict[str, str] | None = None
            wired = self._wire_text(msg)
            if wired is None:
                wire_body, sys_flag, props = self._wire(msg, compress=True)
            else:
                wire_body, sys_flag, text, uniq = wired
            t0 = time.monotonic()
            api = inst.api
            fast = self._send_from_thread(
                msg.topic, t, t0, lambda mq: _request_frame(api, api.send_request(
                    msg, mq.queue_id, producer_group=self.group, body=wire_body, sys_flag=sys_flag, properties=props,
                    default_topic=self.create_topic_key, default_topic_queue_nums=self.default_topic_queue_nums,
                    properties_text=text, uniq=uniq)))
            return self._send_rest(msg, wire_body, sys_flag, props, text, uniq, t, t0, fast)
        wire_body, sys_flag, props = self._wire(msg, compress=True)
        return self._user_result(
            inst.run(self._send_async(msg, wire_body, sys_flag, props, queue, selector, arg, t), t + 1.0))

    def _send_rest(self, msg: Message, wire_body: bytes, sys_flag: int, props: dict[str, str] | None,
                   text: str | None, uniq: str | None, t: float, t0: float,
                   fast: tuple[SendResult | None, tuple[str, Exception] | None] | None) -> SendResult:
        """What is left of a round-robin send after :meth:`_send_from_thread`'s answer ``fast``: its result,
        the retries on the loop after its failure, or (None: not sent) the whole send on the loop."""
        inst = self.instance
        if fast is not None:
            result, failed = fast
            if result is not None:
                return self._user_result(result)

            async def attempt(mq: MessageQueue, left: float) -> SendResult:
                addr = await self._broker_addr(mq, left)
                return await inst.api.send(addr, mq.broker_name, msg, mq.queue_id, producer_group=self.group,
                                           timeout=left, body=wire_body, sys_flag=sys_flag, properties=props,
                                           default_topic=self.create_topic_key,
                                           default_topic_queue_nums=self.default_topic_queue_nums,
                                           properties_text=text, uniq=uniq)
            return self._user_result(inst.run(self._with_retries(msg.topic, attempt, t, t0, failed), t + 1.0))
        if props is None:   # the loop sends it all (no route or connection yet): the properties as a map
            wire_body, sys_flag, props = self._wire(msg, compress=True, uniq_key=uniq)
        return self._user_result(
            inst.run(self._send_async(msg, wire_body, sys_flag, props, None, None, None, t), t + 1.0))

    def _send_plain(self, topic: str, body: bytes, tags: str | None, keys: str | None,
                    timeout: float | None) -> SendResult | None:
        """:meth:`send` of ``topic`` + ``body`` (+ ``tags`` / ``keys`` strings) and nothing else, round robin:
        what is per topic (its checks, its name in the namespace, its request template) is looked up in
        :attr:`_plain`, the properties text as :meth:`_wire_text` makes it, and the frame filled in from the
        template (:meth:`MQClientAPI.send_template`). None (nothing sent) for anything :meth:`send` does
        otherwise: a topic that is not valid, a retry topic, a body empty or too large, or no template
        (credentials)."""
        plain = self._plain.get(topic, _NOT_KEPT)   # (one look-up: another thread may empty it meanwhile)
        if plain is _NOT_KEPT:
            plain = self._plain_topic(topic)
        if plain is None:
            return None
        wire_topic, template = plain
        n = len(body)
        if not 0 < n <= self.max_message_size:
            return None
        head = self._heads.get((tags, keys, True, 0))
        if head is None:
            head = _uniq_head(self._heads, Message(wire_topic, body, tags=tags, keys=keys))
            if head is None:
                return None
        uniq = new_uniq_key()
        text = head + uniq
        if len(text) + 1 > MAX_PROPERTIES_LENGTH:   # (_wire_text raises it)
            return None
        wire_body, sys_flag = body, 0
        if n >= self.compress_msg_body_over_howmuch:   # tryToCompressMessage
            wire_body, sys_flag = compress_body(body, self.compress_level)
        t = self.send_msg_timeout if timeout is None else timeout
        t0 = time.monotonic()
        inst = self.instance
        api = inst.api

        def build(mq: MessageQueue) -> tuple[int, int, bytes, str]:
            opaque = next_opaque()
            try:   # SendMessageRequestHeaderV2: queueId, sysFlag, bornTimestamp, flag, properties
                return opaque, _SEND_MESSAGE_V2, template.frame(opaque, mq.queue_id, sys_flag,
                                                                int(time.time() * 1000), 0, text,
                                                                body=wire_body), uniq
            except UnicodeEncodeError:   # a lone surrogate: encoded in full (JSON escapes it)
                return _request_frame(api, api.send_request(
                    Message(wire_topic, body, tags=tags, keys=keys), mq.queue_id, producer_group=self.group,
                    body=wire_body, sys_flag=sys_flag, default_topic=self.create_topic_key,
                    default_topic_queue_nums=self.default_topic_queue_nums, properties_text=text, uniq=uniq))
        fast = self._send_from_thread(wire_topic, t, t0, build)
        if fast is not None and fast[0] is not None:
            return self._user_result(fast[0])
        return self._send_rest(Message(wire_topic, body, tags=tags, keys=keys), wire_body, sys_flag, None, text,
                               uniq, t, t0, fast)

    def _plain_topic(self, topic: str) -> tuple[str, RequestTemplate] | None:
        """:attr:`_plain`'s entry for ``topic``: its name on the broker (in the namespace) and the template of
        its SEND_MESSAGE_V2 requests, once the checks of :meth:`send` pass; None for a topic :meth:`send`
        refuses (not kept: it raises there), and None kept for a topic whose sends take the general path (a
        retry topic, no template: credentials)."""
        try:
            check_topic(topic)
            wire_topic = wrap(self.namespace, topic) if self.namespace else topic
            check_topic(wire_topic)
        except OptionError:
            return None
        if topic in NOT_ALLOWED_SEND_TOPICS or self._instance is None:
            return None
        plain: tuple[str, RequestTemplate] | None = None
        if not wire_topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            template = self._instance.api.send_template(wire_topic, self.group, self.create_topic_key,
                                                        self.default_topic_queue_nums)
            plain = None if template is None else (wire_topic, template)
        if len(self._plain) >= 1024:   # a producer of ever new topics: start over
            self._plain.clear()
        self._plain[topic] = plain
        return plain

    def _user_selector(self, selector: MessageQueueSelector, user_msg: Message) -> MessageQueueSelector:
        """``sendSelectImpl`` with a namespace: the selector sees the queues and the message without it, and
        the queue it picks is put back in it."""
        def select(mqs: list[MessageQueue], _msg: Message, arg: Any) -> MessageQueue:
            chosen = selector([self._unwrap_queue(mq) for mq in mqs], user_msg, arg)
            return self._wrap_queue(chosen) if isinstance(chosen, MessageQueue) else chosen
        return select

    def _send_from_thread(self, topic: str, timeout: float, t0: float,
                          build: Callable[[MessageQueue], tuple[int, int, bytes, str]],
                          ) -> tuple[SendResult | None, tuple[str, Exception] | None] | None:
        """``sendDefaultImpl``'s first attempt from the caller's thread when the topic's route and the broker's
        connection are known (``build(mq)``: the request's opaque, code, frame and UNIQ_KEY(s), encoded here;
        the loop only writes it when the pool cannot): (result, None), or (None, (broker name, error)) after a
        failure to retry on the loop (:meth:`_with_retries`); None when the loop must do it all (no route
        yet, not connected)."""
        info = self._publish.get(topic)
        inst = self.instance
        if info is None or not info.ok or not inst.running or inst.in_loop_thread():
            return None   # (from the loop thread inst.run raises the error)
        mq = info.select(None)
        addr = inst.broker_addr(mq.broker_name)
        api = inst.api
        if addr is None or not api.connected(addr):
            return None
        opaque, code, frame, uniq = build(mq)
        try:
            result = api.send_frame_from_thread(addr, mq.broker_name, topic, opaque, code, frame, uniq,
                                                max(timeout - (time.monotonic() - t0), 0.001), inst.call_soon)
        except BrokerResponseError as exc:
            if exc.code not in RETRY_RESPONSE_CODES:
                raise
            error: Exception = exc
        except (RemotingError, MQClientError) as exc:
            error = exc
        else:
            if result is None:   # the connection closed meanwhile
                return None
            if result.status is not SendStatus.SEND_OK:
                log.info("producer %s: %s stored with status %s", self.group, result.msg_id, result.status.name)
            return result, None
        log.info("producer %s: send to %s failed (attempt 1 of %d): %s", self.group, mq,
                 1 + self.retry_times_when_send_failed, error)
        return None, (mq.broker_name, error)

    def send_batch(self, topic: str, messages: Sequence[bytes | Message], *, tags: str | None = None,
                   keys: str | Iterable[str] | None = None, queue: MessageQueue | None = None,
                   timeout: float | None = None) -> SendResult:
        """``send(Collection<Message>)``: one SEND_BATCH_MESSAGE (never compressed); every message must have
        the topic, no delay level, the same WAIT; not a retry topic. Bodies take ``tags``/``keys``."""
        check_topic(topic)
        if not messages:
            raise OptionError("messages", "a batch needs at least one message")
        msgs = [m if isinstance(m, Message) else Message(topic, bytes(m), tags=tags, keys=keys) for m in messages]
        wait, max_size = msgs[0].wait_store_msg_ok, self.max_message_size
        for i, m in enumerate(msgs):
            if i and m.topic == topic and type(m.body) is bytes and 0 < len(m.body) <= max_size \
                    and not m.properties and m.delay_level == 0 and type(m.delay_level) is int \
                    and type(m.flag) is int and -_INT32 <= m.flag < _INT32 and m.wait_store_msg_ok == wait:
                continue   # what every check below (check_message) lets through, seen at once
            if m.topic != topic:
                raise OptionError(f"messages[{i}].topic", f"the topic of the messages in one batch should be the "
                                                          f"same ({topic})", m.topic)
            if m.delay_level > 0 or PROPERTY_DELAY in m.properties:
                raise OptionError(f"messages[{i}].delay_level", "delayed messages are not supported in a batch")
            if m.wait_store_msg_ok != wait:
                raise OptionError(f"messages[{i}].wait_store_msg_ok", "must be the same for every message")
            check_message(m, max_size, topic_checked=i > 0)   # one topic: checked once
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            raise OptionError("topic", "retry group topic is not supported for batching", topic)
        if queue is not None and queue.topic != topic:
            raise OptionError("queue", f"message's topic {topic} not equal mq's topic {queue.topic}")
        if self.namespace:   # DefaultMQProducer.batch: every message's topic and the batch's in the namespace
            topic = wrap(self.namespace, topic)
            msgs = [self._wrap_message(m) for m in msgs]
            check_topic(topic)
            if queue is not None:
                queue = self._wrap_queue(queue)
        body, uniq, size = _encode_batch(msgs, new_uniq_keys(len(msgs)))
        if size > self.max_message_size:
            raise OptionError("messages", f"the batch body size {size} is over the max value {self.max_message_size}")
        t = self.send_msg_timeout if timeout is None else timeout
        inst = self.instance
        if queue is None:
            t0 = time.monotonic()
            api = inst.api
            fast = self._send_from_thread(topic, t, t0, lambda mq: _request_frame(api, api.send_batch_request(
                msgs, mq.queue_id, producer_group=self.group, body=body, uniq=uniq,
                default_topic=self.create_topic_key, default_topic_queue_nums=self.default_topic_queue_nums)))
            if fast is not None:
                result, failed = fast
                if result is not None:
                    return self._user_result(result)
                return self._user_result(inst.run(self._send_batch_async(msgs, body, uniq, None, t, t0, failed),
                                                  t + 1.0))
        return self._user_result(inst.run(self._send_batch_async(msgs, body, uniq, queue, t), t + 1.0))

    # ------------------------------------------------------------------------- on the loop
    async def _publish_info(self, topic: str, timeout: float) -> TopicPublishInfo:
        """``tryToFindTopicPublishInfo``."""
        inst = self.instance
        info = self._publish.get(topic)
        if info is None or not info.ok:
            self._publish.setdefault(topic, TopicPublishInfo(topic, []))
            await inst.update_route(topic, timeout=timeout)
            info = self._publish[topic]
        if info.ok:
            return info
        await inst.update_route(topic, default_topic=self.create_topic_key,
                                default_queue_nums=self.default_topic_queue_nums, timeout=timeout)
        info = self._publish[topic]
        if not info.ok:
            raise MQClientError(f"No route info of this topic: {topic} (name server {self.namesrv})")
        return info

    async def _broker_addr(self, mq: MessageQueue, timeout: float) -> str:
        inst = self.instance
        addr = inst.broker_addr(mq.broker_name)
        if addr is None:
            await inst.update_route(mq.topic, timeout=timeout)
            addr = inst.broker_addr(mq.broker_name)
        if addr is None:
            raise MQClientError(f"The broker[{mq.broker_name}] not exist")
        return addr

    async def _send_async(self, msg: Message, body: bytes, sys_flag: int, props: dict[str, str],
                          queue: MessageQueue | None, selector: MessageQueueSelector | None, arg: Any,
                          timeout: float) -> SendResult:
        t0 = time.monotonic()
        if queue is not None or selector is not None:
            if queue is None:
                assert selector is not None
                info = await self._publish_info(msg.topic, timeout)
                queue = selector(list(info.queues), msg, arg)
                if not isinstance(queue, MessageQueue):
                    raise OptionError("selector", f"returned {queue!r}, not a MessageQueue")
            left = timeout - (time.monotonic() - t0)
            if left <= 0:
                raise RemotingTimeoutError("send call timeout", addr=self.namesrv, timeout_s=timeout)
            addr = await self._broker_addr(queue, left)
            return await self.instance.api.send(addr, queue.broker_name, msg, queue.queue_id,
                                                producer_group=self.group, timeout=left, body=body,
                                                sys_flag=sys_flag, properties=props,
                                                default_topic=self.create_topic_key,
                                                default_topic_queue_nums=self.default_topic_queue_nums)

        async def attempt(mq: MessageQueue, left: float) -> SendResult:
            addr = await self._broker_addr(mq, left)
            return await self.instance.api.send(addr, mq.broker_name, msg, mq.queue_id, producer_group=self.group,
                                                timeout=left, body=body, sys_flag=sys_flag, properties=props,
                                                default_topic=self.create_topic_key,
                                                default_topic_queue_nums=self.default_topic_queue_nums)
        return await self._with_retries(msg.topic, attempt, timeout, t0)

    async def _send_batch_async(self, msgs: list[Message], body: bytes, uniq: str, queue: MessageQueue | None,
                                timeout: float, t0: float | None = None,
                                failed: tuple[str, Exception] | None = None) -> SendResult:
        t0 = time.monotonic() if t0 is None else t0

        async def attempt(mq: MessageQueue, left: float) -> SendResult:
            addr = await self._broker_addr(mq, left)
            return await self.instance.api.send_batch(addr, mq.broker_name, msgs, mq.queue_id,
                                                      producer_group=self.group, timeout=left, body=body, uniq=uniq,
                                                      default_topic=self.create_topic_key,
                                                      default_topic_queue_nums=self.default_topic_queue_nums)
        if queue is not None:
            return await attempt(queue, timeout)
        return await self._with_retries(msgs[0].topic, attempt, timeout, t0, failed)

    async def _with_retries(self, topic: str, attempt: Callable[[MessageQueue, float], Any], timeout: float,
                            t0: float, failed: tuple[str, Exception] | None = None) -> SendResult:
        """``sendDefaultImpl``'s loop: ``1 + retry_times_when_send_failed`` attempts, another broker after a
        failure, retry on remoting errors and ``retryResponseCodes``, all within ``timeout``. ``failed``: the
        first attempt was made (from the caller's thread) and failed on that broker with that error."""
        info = await self._publish_info(topic, timeout)
        times = 1 + self.retry_times_when_send_failed
        last_broker: str | None = None
        last_error: Exception | None = None
        brokers_sent: list[str] = []
        first = 1
        if failed is not None:
            last_broker, last_error = failed
            brokers_sent.append(last_broker)
            first = 2
            if time.monotonic() - t0 < timeout:
                info = await self._publish_info(topic, max(timeout - (time.monotonic() - t0), 0.001))
        n = first - 1
        for n in range(first, times + 1):
            mq = info.select(last_broker)
            last_broker = mq.broker_name
            brokers_sent.append(mq.broker_name)
            left = timeout - (time.monotonic() - t0)
            if left <= 0:
                n -= 1
                break
            try:
                result: SendResult = await attempt(mq, left)
                if result.status is not SendStatus.SEND_OK:
                    log.info("producer %s: %s stored with status %s", self.group, result.msg_id, result.status.name)
                return result
            except BrokerResponseError as exc:
                if exc.code not in RETRY_RESPONSE_CODES:
                    raise
                last_error = exc
            except (RemotingError, MQClientError) as exc:
                last_error = exc
            log.info("producer %s: send to %s failed (attempt %d of %d): %s", self.group, mq, n, times, last_error)
            info = await self._publish_info(topic, max(timeout - (time.monotonic() - t0), 0.001)) \
                if time.monotonic() - t0 < timeout else info
        cost = int((time.monotonic() - t0) * 1000)
        if last_error is None:
            raise RemotingTimeoutError(f"sendDefaultImpl call timeout after {cost} ms (topic {topic})",
                                       addr=self.namesrv, timeout_s=timeout)
        raise SendFailedError(f"Send [{n}] times, still failed, cost [{cost}]ms, Topic: {topic}, "
                              f"BrokersSent: {brokers_sent}: {last_error}", topic=topic, attempts=n) from last_error
