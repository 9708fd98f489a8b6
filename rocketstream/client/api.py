"""``MQClientAPIImpl``: one coroutine per request the client sends, over one connection per address.

Every method runs on the owning :class:`~rocketstream.client.instance.MQClientInstance`'s event loop.
Errors: a connection problem raises ``RemotingConnectError`` / ``RemotingTimeoutError`` (naming the
address); a broker or name server error code raises :class:`BrokerResponseError` (code + remark + address),
except where RocketMQ's client treats a code as a value (17 for routes, 22 for offsets, 10/11/12 for sends,
19/20/21 for pulls). :func:`process_pull_result` is ``PullAPIWrapper.processPullResult``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import ssl
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from rocketstream.client.common import (
    PROPERTY_MAX_OFFSET,
    PROPERTY_MIN_OFFSET,
    Message,
    MessageExt,
    MessageQueue,
    PullResult,
    PullStatus,
    SendResult,
    SendStatus,
)
from rocketstream.client.credentials import Credentials
from rocketstream.client.route import TopicRouteData, parse_route
from rocketstream.client.subscription import SubscriptionData
from rocketstream.client.tls import TlsConfig, tls_config
from rocketstream.codec import (
    FLAG_COMPRESSED,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    TRANSACTION_MASK,
    TRANSACTION_PREPARED,
    decode_record,
    decompress_body,
    encode_batch_body,
    encode_properties,
)
from rocketstream.errors import (
    BodyError,
    BrokerResponseError,
    CorruptStoreError,
    HeaderFieldError,
    OptionError,
    RemotingConnectError,
    RemotingTimeoutError,
    TlsError,
)
from rocketstream.remoting import Channel, RemotingCommand, RequestCode, ResponseCode, connect, json_body
from rocketstream.remoting.acl_signing import sign_fields
from rocketstream.remoting.blocking import BlockingPool
from rocketstream.remoting.channel import RequestHandler, ResponseWaiter, next_opaque
from rocketstream.remoting.codes import code_name
from rocketstream.remoting.command import ONEWAY_FLAG, RequestTemplate, encode_frame

if TYPE_CHECKING:
    from rocketstream.client.topic_stats import TopicStats

__all__ = ["MQClientAPI", "process_pull_result", "decode_messages", "properties_string", "SEND_OK_CODES",
           "RETRY_RESPONSE_CODES", "PULL_SYS_FLAG_COMMIT_OFFSET", "PULL_SYS_FLAG_SUSPEND",
           "PULL_SYS_FLAG_SUBSCRIPTION", "PULL_SYS_FLAG_CLASS_FILTER", "PULL_SYS_FLAG_LITE_PULL",
           "build_pull_sys_flag"]

log = logging.getLogger("rocketstream.client")

DEFAULT_TIMEOUT_S = 3.0   # ClientConfig.mqClientApiTimeout

# MQClientAPIImpl.processSendResponse: these codes are stored sends with a non-OK status
SEND_OK_CODES = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}
# DefaultMQProducer.retryResponseCodes
RETRY_RESPONSE_CODES = frozenset({
    ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SYSTEM_ERROR,
    ResponseCode.NO_PERMISSION, ResponseCode.NO_BUYER_ID, ResponseCode.NOT_IN_CURRENT_UNIT,
})

# SendMessageRequestHeaderV2's fields as _send_request writes them (no ``l``: not a retry), and those that change
# from one send to the next of a topic (MQClientAPI._send_frame)
_SEND_KEYS = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "m")
_SEND_VARYING = ("e", "f", "g", "h", "i")
_NO_TEMPLATE: Any = object()
# requests thread_frame fills in from a template: single sends only. A SEND_BATCH_MESSAGE through its template
# was slower in bench_client.py's 8-thread batch run (ours 47-52 k msgs/s against 54-58 k encoded in full,
# 4.9.8 broker, quiet machine), so batches are encoded in full
_TEMPLATE_CODES = (RequestCode.SEND_MESSAGE_V2,)

# PullSysFlag
PULL_SYS_FLAG_COMMIT_OFFSET = 0x1
PULL_SYS_FLAG_SUSPEND = 0x2
PULL_SYS_FLAG_SUBSCRIPTION = 0x4
PULL_SYS_FLAG_CLASS_FILTER = 0x8
PULL_SYS_FLAG_LITE_PULL = 0x10

_PULL_STATUS = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


def build_pull_sys_flag(commit_offset: bool, suspend: bool, subscription: bool, class_filter: bool = False,
                        lite_pull: bool = False) -> int:
    """``PullSysFlag.buildSysFlag``."""
    return ((PULL_SYS_FLAG_COMMIT_OFFSET if commit_offset else 0) | (PULL_SYS_FLAG_SUSPEND if suspend else 0)
            | (PULL_SYS_FLAG_SUBSCRIPTION if subscription else 0) | (PULL_SYS_FLAG_CLASS_FILTER if class_filter else 0)
            | (PULL_SYS_FLAG_LITE_PULL if lite_pull else 0))


def properties_string(props: dict[str, str]) -> str:
    """``MessageDecoder.messageProperties2String`` as 4.9.8 writes it: ``k\\x01v\\x02`` pairs, the last
    ``\\x02`` removed."""
    if not props:
        return ""
    text = "".join([f"{k}\x01{v}\x02" for k, v in props.items() if v is not None])
    n = len(props) if None not in props.values() else sum(v is not None for v in props.values())
    if text.isascii() and text.count("\x01") == n and text.count("\x02") == n:
        return text[:-1]   # what encode_properties would accept and give back, without the UTF-8 round trip
    return encode_properties(props).decode("utf-8")[:-1]


def _mq_json(mq: MessageQueue) -> dict[str, object]:
    return {"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic}


def _mq_from_json(doc: object, addr: str) -> MessageQueue:
    if not isinstance(doc, dict) or not isinstance(doc.get("topic"), str) or not isinstance(doc.get("brokerName"), str):
        raise BodyError(f"not a MessageQueue: {doc!r:.100}", addr=addr)
    try:
        return MessageQueue(doc["topic"], doc["brokerName"], int(doc.get("queueId", 0)))
    except (TypeError, ValueError):
        raise BodyError(f"MessageQueue queueId is not a number: {doc!r:.100}", addr=addr) from None


# pull_tiles' request templates kept per client (queues x groups x filters of the queries running)
_PULL_TEMPLATES = 4096
# PULL_MESSAGE's extFields a push consumer's pulls of one queue vary (MQClientAPI.pull), in _pull_fields' order
_PULL_VARYING = ("queueOffset", "maxMsgNums", "sysFlag", "commitOffset", "suspendTimeoutMillis", "subVersion")


class _TileRound:
    """The answers to one :meth:`MQClientAPI.pull_tiles`: ``future`` is done once every request is answered
    or failed (``Channel.close`` fails each pending one), or at the timeout (:meth:`expire`)."""

    __slots__ = ("future", "responses", "errors", "left")

    def __init__(self, loop: asyncio.AbstractEventLoop, n: int) -> None:
        self.future: asyncio.Future[None] = loop.create_future()
        self.responses: list[RemotingCommand | None] = [None] * n
        self.errors: list[BaseException | None] = [None] * n
        self.left = n

    def answered(self) -> None:
        self.left -= 1
        if not self.left and not self.future.done():
            self.future.set_result(None)

    def expire(self) -> None:
        if not self.future.done():
            self.future.set_result(None)


class _TileWaiter(ResponseWaiter):
    """One request of a :class:`_TileRound`, as ``Channel.start_request`` completes it (on the loop: no locks)."""

    __slots__ = ("round", "index")

    def __init__(self, wait: _TileRound, index: int) -> None:   # not ResponseWaiter's: no locks
        self.round, self.index = wait, index

    def done(self) -> bool:
        r = self.round
        return r.responses[self.index] is not None or r.errors[self.index] is not None

    def set_result(self, response: RemotingCommand) -> None:
        if not self.done():
            self.round.responses[self.index] = response
            self.round.answered()

    def set_exception(self, error: BaseException) -> None:
        if not self.done():
            self.round.errors[self.index] = error
            self.round.answered()


class MQClientAPI:
    """Request wrappers plus the connection table (``NettyRemotingClient.channelTables``): one
    :class:`Channel` per address, created on first use; a closed one is replaced on the next request.

    ``namesrv`` is RocketMQ's ``namesrvAddr``: one or more ``host:port`` separated by ``;``. Name-server
    requests go to the current one and move on to the next when it cannot be reached.

    ``credentials``: every request sent (:meth:`invoke`, :meth:`invoke_oneway`, :meth:`invoke_from_thread`,
    and so every name-server request too) is signed as ``AclClientRPCHook.doBeforeRequest`` signs it
    (:meth:`signed`). Java's hook signs name-server requests as well; a 4.9.8 name server has no ACL and
    ignores the extra fields. Answers to requests a broker sends us are responses: not signed (Java runs
    no ``doBeforeRequest`` on the response it writes).

    ``tls`` (a :class:`~rocketstream.client.tls.TlsConfig` or True): every connection, to name servers and
    brokers alike, is TLS (``NettyClientConfig.useTLS``); the context is made once, on the first connection.
    """

    def __init__(self, namesrv: str, *, on_request: RequestHandler | None = None,
                 connect_timeout: float = 3.0, credentials: Credentials | None = None,
                 tls: TlsConfig | bool | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                 blocking_sends: bool = True) -> None:
        self.tls = tls_config(tls)
        self._ssl: ssl.SSLContext | None = None
        self.timeout = timeout   # of a request whose caller names none (ClientConfig.mqClientApiTimeout)
        if credentials is not None and not isinstance(credentials, Credentials):
            raise OptionError("credentials", "must be a rocketstream.client.Credentials or None, not "
                              + type(credentials).__name__)
        self.credentials = credentials
        self.namesrv_addrs = [a.strip() for a in namesrv.split(";") if a.strip()]
        if not self.namesrv_addrs:
            raise RemotingConnectError(f"no name server address in {namesrv!r}", addr=namesrv)
        self._ns_index = 0
        self.on_request = on_request
        self.connect_timeout = connect_timeout
        self._channels: dict[str, Channel] = {}
        self._connecting: dict[str, asyncio.Lock] = {}
        self.broker_versions: dict[str, int] = {}   # MQClientInstance.brokerVersionTable (per address)
        self._pull_templates: dict[tuple[str, str, int, int, str], RequestTemplate | None] = {}
        self._pull_request_templates: dict[tuple[str, str, int, str | None, str], RequestTemplate | None] = {}
        self._send_templates: dict[tuple[object, ...], RequestTemplate | None] = {}
        # invoke_from_thread's connections, one per calling thread at a time (plain TCP; TLS stays on the loop)
        self.blocking: BlockingPool | None = None if self.tls is not None or not blocking_sends else \
            BlockingPool(connect_timeout=connect_timeout)

    # ------------------------------------------------------------------------- connections
    async def channel(self, addr: str, timeout: float | None = None) -> Channel:
        ch = self._channels.get(addr)
        if ch is not None and not ch.closed:
            return ch
        lock = self._connecting.setdefault(addr, asyncio.Lock())
        async with lock:
            ch = self._channels.get(addr)
            if ch is not None and not ch.closed:
                return ch
            t = self.connect_timeout if timeout is None else min(timeout, self.connect_timeout)
            if self.tls is not None and self._ssl is None:
                self._ssl = self.tls.ssl_context()
            ch = await connect(addr, on_request=self.on_request, timeout=t, ssl=self._ssl)
            self._channels[addr] = ch
            return ch

    def connected(self, addr: str) -> bool:
        """An open connection to ``addr`` exists (any thread)."""
        ch = self._channels.get(addr)
        return ch is not None and not ch.closed

    def open_channel(self, addr: str) -> Channel | None:
        """The open connection to ``addr``, None when there is none (any thread; connects nothing)."""
        ch = self._channels.get(addr)
        return ch if ch is not None and not ch.closed else None

    async def close(self) -> None:
        if self.blocking is not None:
            self.blocking.close()
        chans = list(self._channels.values())
        self._channels.clear()
        for ch in chans:
            with contextlib.suppress(Exception):
                await ch.aclose()

    def close_channel(self, addr: str) -> None:
        ch = self._channels.pop(addr, None)
        if ch is not None:
            ch.close("closed by the client")
        if self.blocking is not None:
            self.blocking.close_addr(addr)

    def signed(self, request: RemotingCommand) -> RemotingCommand:
        """``AclClientRPCHook.doBeforeRequest``: with credentials, a copy of ``request`` whose extFields also
        carry AccessKey, SecurityToken (when set) and Signature over every extField and the body; without,
        ``request`` itself. The caller's request is not changed, so a request object kept (or shown) by
        the caller never holds the token."""
        cred = self.credentials
        if cred is None:
            return request
        body = request.body if request.body_parts is None else b"".join(request.body_parts)
        fields = sign_fields(dict(request.ext_fields or {}), body, cred.access_key, cred.secret_key,
                             cred.security_token)
        return dataclasses.replace(request, ext_fields=fields)

    async def invoke(self, addr: str, request: RemotingCommand, timeout: float | None, *,
                     body_buffer: bool = False) -> RemotingCommand:
        """``invokeSync``: connect if needed, send (:meth:`signed`), wait; the connect time counts against
        ``timeout`` (None: this instance's). ``body_buffer``: see :meth:`Channel.invoke`."""
        timeout = self.timeout if timeout is None else timeout
        t0 = time.monotonic()
        signed = self.signed(request)
        if log.isEnabledFor(logging.DEBUG):   # the command's repr masks its SecurityToken
            log.debug("request to %s: %r", addr, signed)
        ch = await self.channel(addr, timeout)
        left = max(timeout - (time.monotonic() - t0), 0.001)
        return await ch.invoke(signed, left, body_buffer=body_buffer)

    def invoke_from_thread(self, addr: str, request: RemotingCommand, timeout: float,
                           call_soon: Callable[..., None]) -> RemotingCommand | None:
        """``invokeSync`` from a thread that is not the loop's, when the loop has an open connection to ``addr``
        (the one the broker knows from heartbeats): the request is encoded (and signed) here
        (:meth:`thread_frame`) and sent by :meth:`invoke_frame_from_thread`. None when ``addr`` has no open
        connection (use :meth:`invoke` on the loop)."""
        if not self.connected(addr):
            return None
        opaque, frame = self.thread_frame(request)
        return self.invoke_frame_from_thread(addr, opaque, request.code, frame, timeout, call_soon)

    def thread_frame(self, request: RemotingCommand) -> tuple[int, bytes]:
        """(opaque, frame) of ``request`` as :meth:`invoke_frame_from_thread` sends it: :meth:`signed`, a new
        opaque, not oneway, encoded (a SEND_MESSAGE_V2 request of :meth:`_send_request`
        through its :class:`RequestTemplate`). Any thread; ``request`` gets the opaque."""
        request = self.signed(request)
        request.opaque = next_opaque()
        request.flag &= ~ONEWAY_FLAG
        frame = self._send_frame(request) if request.code in _TEMPLATE_CODES else encode_frame(request)
        return request.opaque, frame

    def invoke_frame_from_thread(self, addr: str, opaque: int, code: int, frame: bytes, timeout: float,
                                 call_soon: Callable[..., None]) -> RemotingCommand | None:
        """Send ``frame`` (an encoded request with ``opaque`` and ``code``, :meth:`thread_frame` or
        :meth:`send_template`'s) from this thread and wait for its answer. Plain TCP: this thread writes it
        on a connection of its own from :attr:`blocking` and reads the answer itself (remoting/blocking.py: no
        loop hop). TLS, ``blocking_sends=False``, or more threads at once than the pool's ``max_per_addr``:
        the loop's connection carries it (the frame written by this thread when the socket takes it at once,
        else by the loop: ``call_soon``, the instance's) and the loop completes the waiter this thread blocks
        on. None when ``addr`` has no open connection (nothing sent). RemotingTimeoutError /
        RemotingConnectError as :meth:`invoke` raises them."""
        ch = self._channels.get(addr)
        if ch is None or ch.closed:
            return None
        if self.blocking is not None:   # this thread writes and reads the answer itself (remoting/blocking.py)
            response = self.blocking.invoke(addr, opaque, frame, timeout, code)
            if response is not None:
                return response   # (else every connection of the pool to addr is in use: the loop's takes it)
        waiter = ResponseWaiter()
        if not ch.write_from_thread(opaque, frame, waiter):   # else the loop writes it
            call_soon(ch.start_request, opaque, frame, waiter)
        response = waiter.wait(timeout)
        if response is None:
            call_soon(ch.forget, opaque)
            raise RemotingTimeoutError(
                f"no response to {code_name(code)} (opaque {opaque}) within {timeout:g} s",
                addr=ch.addr, code=code, timeout_s=timeout)
        return response

    def _send_frame(self, request: RemotingCommand) -> bytes:
        """``encode_frame(request)`` of a SEND_MESSAGE_V2 request (:data:`_TEMPLATE_CODES`) as :meth:`_send_request`
        makes them (not signed: a signed one has more fields and is encoded in full), through a
        :class:`RequestTemplate` per (group, topic, ...) with queueId, sysFlag, bornTimestamp, flag and
        properties left to fill in."""
        template = self._template(request)
        if template is None:
            return encode_frame(request)
        f = request.ext_fields
        assert f is not None   # (_template checked it)
        try:
            return template.frame(request.opaque, f["e"], f["f"], f["g"], f["h"], f["i"], body=request.body)
        except UnicodeEncodeError:   # a lone surrogate: encode_frame escapes it as JSON does
            return encode_frame(request)

    def _template(self, request: RemotingCommand) -> RequestTemplate | None:
        """The :class:`RequestTemplate` of a send request of :meth:`_send_request` (made once per group, topic,
        default topic, ...); None for any other request, or one its template cannot make."""
        f = request.ext_fields
        if f is None or request.remark is not None or tuple(f) != _SEND_KEYS:
            return None
        key = (request.code, f["a"], f["b"], f["c"], f["d"], f["j"], f["k"], f["m"], request.flag, request.language,
               request.version)
        templates = self._send_templates
        template: RequestTemplate | None = templates.get(key, _NO_TEMPLATE)
        if template is _NO_TEMPLATE:
            if len(templates) >= 256:   # a producer sending to ever new topics: start over
                templates.clear()
            template = templates[key] = RequestTemplate.make(request, _SEND_VARYING, texts=_SEND_VARYING,
                                                             body=True)
        return template

    def send_template(self, topic: str, producer_group: str, default_topic: str,
                      default_topic_queue_nums: int) -> RequestTemplate | None:
        """The template of :meth:`send_request`'s SEND_MESSAGE_V2 requests to ``topic`` (not a retry topic)
        without credentials: ``frame(opaque, queueId, sysFlag, bornTimestamp, flag, properties, body=...)``
        (the first four integers, the properties as :func:`properties_string` writes them) is byte for byte
        the frame :meth:`thread_frame` makes of such a request. None with credentials (a signed request is
        encoded in full) or when no template can be made; then use :meth:`thread_frame`. Batches have none
        (:data:`_TEMPLATE_CODES`)."""
        if self.credentials is not None:
            return None
        code = RequestCode.SEND_MESSAGE_V2
        probe = self._send_request(code, topic, 0, 0, 0, "", producer_group, default_topic,
                                   default_topic_queue_nums, False, b"\x00")
        f = probe.ext_fields
        assert f is not None
        key = ("numbers", code, producer_group, topic, default_topic, f["d"], probe.flag, probe.language,
               probe.version)
        templates = self._send_templates
        template: RequestTemplate | None = templates.get(key, _NO_TEMPLATE)
        if template is _NO_TEMPLATE:
            if len(templates) >= 256:
                templates.clear()
            template = templates[key] = RequestTemplate.make(probe, _SEND_VARYING, texts=("i",), body=True)
        return template

    async def invoke_oneway(self, addr: str, request: RemotingCommand, timeout: float | None = None) -> None:
        """``invokeOneway`` (signed as :meth:`invoke`: Java's hook runs for oneway requests too)."""
        ch = await self.channel(addr, self.timeout if timeout is None else timeout)
        await ch.invoke_oneway(self.signed(request))

    async def invoke_namesrv(self, request: RemotingCommand,
                             timeout: float | None) -> tuple[str, RemotingCommand]:
        """Send to the current name server; on a connection error try the others in turn (each send signed
        by :meth:`invoke`); ``timeout`` None: this instance's."""
        errors: list[RemotingConnectError] = []
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        n = len(self.namesrv_addrs)
        for k in range(n):
            addr = self.namesrv_addrs[(self._ns_index + k) % n]
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                resp = await self.invoke(addr, RemotingCommand(code=request.code, ext_fields=request.ext_fields,
                                                               body=request.body), left)
            except RemotingConnectError as exc:
                errors.append(exc)
                continue
            self._ns_index = (self._ns_index + k) % n
            return addr, resp
        # every name server refused the TLS handshake: still a TlsError (the type tells a TLS problem apart)
        kind = TlsError if errors and all(isinstance(e, TlsError) for e in errors) else RemotingConnectError
        raise kind("no name server reachable: " + "; ".join([str(e) for e in errors] or ["timed out"]),
                   addr=";".join(self.namesrv_addrs))

    @staticmethod
    def _check(resp: RemotingCommand, addr: str, request_code: int, what: str) -> RemotingCommand:
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerResponseError(resp.code, resp.remark, addr=addr, request_code=request_code, what=what)
        return resp

    @staticmethod
    def _long(resp: RemotingCommand, name: str, addr: str) -> int:
        try:
            return resp.int_field(name)
        except HeaderFieldError as exc:
            raise HeaderFieldError(name, str(exc).split("> ", 1)[-1], addr=addr) from None

    # ------------------------------------------------------------------------- name server
    async def get_route(self, topic: str, timeout: float | None = None) -> TopicRouteData | None:
        """GET_ROUTEINFO_BY_TOPIC (105): the route, or None for TOPIC_NOT_EXIST (17)."""
        req = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        addr, resp = await self.invoke_namesrv(req, timeout)
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        self._check(resp, addr, req.code, f"route of topic {topic}")
        if not resp.body:
            raise BodyError(f"route of topic {topic}: empty body", addr=addr)
        return parse_route(resp.body, addr=addr)

    # ------------------------------------------------------------------------- send
    def _send_request(self, code: int, msg_topic: str, queue_id: int, sys_flag: int, flag: int, props: str,
                      producer_group: str, default_topic: str, default_topic_queue_nums: int, batch: bool,
                      body: bytes, reconsume_times: int | None = None,
                      max_reconsume_times: int | None = None) -> RemotingCommand:
        # SendMessageRequestHeaderV2.createSendMessageRequestHeaderV2: one-letter names, the values as
        # makeCustomHeaderToNet writes them (RemotingCommand.request's stringify, written out: a send is hot)
        fields = {
            "a": producer_group, "b": msg_topic, "c": default_topic, "d": str(default_topic_queue_nums),
            "e": str(queue_id), "f": str(sys_flag), "g": str(int(time.time() * 1000)), "h": str(flag), "i": props,
            "j": "0" if reconsume_times is None else str(reconsume_times), "k": "false",
        }
        if max_reconsume_times is not None:
            fields["l"] = str(max_reconsume_times)
        fields["m"] = "true" if batch else "false"
        return RemotingCommand(code=code, ext_fields=fields, body=body)

    def _send_result(self, resp: RemotingCommand, addr: str, broker_name: str, topic: str,
                     uniq: str, request_code: int) -> SendResult:
        status = SEND_OK_CODES.get(resp.code)
        if status is None:
            raise BrokerResponseError(resp.code, resp.remark, addr=addr, request_code=request_code,
                                      what=f"send to {topic}@{broker_name}")
        ext = resp.ext_fields or {}
        try:   # the usual answer; anything else is read (and reported) by _long
            queue_id, queue_offset = int(ext["queueId"]), int(ext["queueOffset"])
        except (KeyError, ValueError):
            queue_id = self._long(resp, "queueId", addr)
            queue_offset = self._long(resp, "queueOffset", addr)
        return SendResult(status, uniq, ext.get("msgId") or "", MessageQueue(topic, broker_name, queue_id),
                          queue_offset, ext.get("MSG_REGION"), (ext.get("TRACE_ON") or "").lower() == "true")

    async def send(self, addr: str, broker_name: str, msg: Message, queue_id: int, *, producer_group: str,
                   timeout: float | None = None, body: bytes | None = None, sys_flag: int = 0,
                   properties: dict[str, str] | None = None, default_topic: str = "TBW102",
                   default_topic_queue_nums: int = 4, properties_text: str | None = None,
                   uniq: str | None = None) -> SendResult:
        """SEND_MESSAGE_V2 (310). ``body``/``sys_flag``/``properties`` are what goes on the wire (the
        producer compresses and adds UNIQ_KEY); by default the message's own body and properties.
        ``properties_text`` + ``uniq``: see :meth:`send_request`."""
        req, uniq = self.send_request(msg, queue_id, producer_group=producer_group, body=body, sys_flag=sys_flag,
                                      properties=properties, default_topic=default_topic,
                                      default_topic_queue_nums=default_topic_queue_nums,
                                      properties_text=properties_text, uniq=uniq)
        resp = await self.invoke(addr, req, timeout)
        return self._send_result(resp, addr, broker_name, msg.topic, uniq, req.code)

    def send_request(self, msg: Message, queue_id: int, *, producer_group: str, body: bytes | None = None,
                     sys_flag: int = 0, properties: dict[str, str] | None = None, default_topic: str = "TBW102",
                     default_topic_queue_nums: int = 4, properties_text: str | None = None,
                     uniq: str | None = None) -> tuple[RemotingCommand, str]:
        """The SEND_MESSAGE_V2 request of :meth:`send` and the message's UNIQ_KEY (any thread).
        ``properties_text`` + ``uniq``: the wire properties already as :func:`properties_string` writes them,
        and their UNIQ_KEY (not for a retry topic, whose RECONSUME_TIME properties go to the header)."""
        if properties_text is not None:
            if uniq is None or msg.topic.startswith("%RETRY%"):
                raise ValueError("send_request: properties_text needs its uniq, and not a retry topic")
            req = self._send_request(RequestCode.SEND_MESSAGE_V2, msg.topic, queue_id, sys_flag, msg.flag,
                                     properties_text, producer_group, default_topic, default_topic_queue_nums,
                                     False, bytes(msg.body if body is None else body))
            return req, uniq
        props = msg.wire_properties() if properties is None else properties
        reconsume = max_reconsume = None
        if msg.topic.startswith("%RETRY%"):   # sendKernelImpl: RECONSUME_TIME / MAX_RECONSUME_TIMES -> header
            props = dict(props)
            rt, mrt = props.pop("RECONSUME_TIME", None), props.pop("MAX_RECONSUME_TIMES", None)
            reconsume = int(rt) if rt and rt.isdigit() else None
            max_reconsume = int(mrt) if mrt and mrt.isdigit() else None
        req = self._send_request(RequestCode.SEND_MESSAGE_V2, msg.topic, queue_id, sys_flag, msg.flag,
                                 properties_string(props), producer_group, default_topic, default_topic_queue_nums,
                                 False, bytes(msg.body if body is None else body), reconsume, max_reconsume)
        return req, props.get(PROPERTY_UNIQ_KEY, "")

    def send_from_thread(self, addr: str, broker_name: str, topic: str, request: RemotingCommand, uniq: str,
                         timeout: float, call_soon: Callable[..., None]) -> SendResult | None:
        """A request of :meth:`send_request` / :meth:`send_batch_request` sent from the caller's thread
        (:meth:`invoke_from_thread`); None when ``addr`` has no open connection."""
        resp = self.invoke_from_thread(addr, request, timeout, call_soon)
        if resp is None:
            return None
        return self._send_result(resp, addr, broker_name, topic, uniq, request.code)

    def send_frame_from_thread(self, addr: str, broker_name: str, topic: str, opaque: int, code: int, frame: bytes,
                               uniq: str, timeout: float, call_soon: Callable[..., None]) -> SendResult | None:
        """:meth:`send_from_thread` of a request already encoded (:meth:`send_template`, :meth:`thread_frame`)."""
        resp = self.invoke_frame_from_thread(addr, opaque, code, frame, timeout, call_soon)
        if resp is None:
            return None
        return self._send_result(resp, addr, broker_name, topic, uniq, code)

    async def send_batch(self, addr: str, broker_name: str, msgs: list[Message], queue_id: int, *,
                         producer_group: str, timeout: float | None = None,
                         properties: list[dict[str, str]] | None = None, default_topic: str = "TBW102",
                         default_topic_queue_nums: int = 4, body: bytes | None = None,
                         uniq: str | None = None) -> SendResult:
        """SEND_BATCH_MESSAGE (320): body = ``MessageDecoder.encodeMessages``; header ``i`` = the batch's
        properties (``WAIT``), as ``MessageBatch.generateFromList`` sets them. ``body`` + ``uniq``: the body
        and the comma-joined UNIQ_KEYs already made (the producer's one-pass encoding)."""
        req, uniq = self.send_batch_request(msgs, queue_id, producer_group=producer_group, properties=properties,
                                            default_topic=default_topic,
                                            default_topic_queue_nums=default_topic_queue_nums, body=body, uniq=uniq)
        resp = await self.invoke(addr, req, timeout)
        return self._send_result(resp, addr, broker_name, msgs[0].topic, uniq, req.code)

    def send_batch_request(self, msgs: list[Message], queue_id: int, *, producer_group: str,
                           properties: list[dict[str, str]] | None = None, default_topic: str = "TBW102",
                           default_topic_queue_nums: int = 4, encoded_properties: list[bytes] | None = None,
                           body: bytes | None = None, uniq: str | None = None) -> tuple[RemotingCommand, str]:
        """The SEND_BATCH_MESSAGE request of :meth:`send_batch` and the messages' UNIQ_KEYs, comma-joined;
        ``encoded_properties``: ``properties`` already as :func:`properties_string` bytes; ``body`` and
        ``uniq`` (given together): the body and the UNIQ_KEYs already made from the messages."""
        if not msgs:
            raise ValueError("send_batch needs at least one message")
        if (body is None) != (uniq is None):
            raise ValueError("send_batch_request: give body and uniq together")
        if body is None or uniq is None:
            props_list = [m.wire_properties() for m in msgs] if properties is None else properties
            if encoded_properties is None:
                encoded_properties = [encode_properties(p)[:-1] if p else b"" for p in props_list]
            body = encode_batch_body([(m.flag, bytes(m.body), p)
                                      for m, p in zip(msgs, encoded_properties, strict=True)])
            uniq = ",".join(p.get(PROPERTY_UNIQ_KEY, "") for p in props_list)
        wait = "true" if msgs[0].wait_store_msg_ok else "false"
        req = self._send_request(RequestCode.SEND_BATCH_MESSAGE, msgs[0].topic, queue_id, 0, 0,
                                 properties_string({"WAIT": wait}), producer_group, default_topic,
                                 default_topic_queue_nums, True, body)
        return req, uniq

    # ------------------------------------------------------------------------- pull
    @staticmethod
    def _pull_fields(group: str, topic: str, queue_id: int, offset: int, max_nums: int, sys_flag: int,
                     commit_offset: int, suspend_ms: int, subscription: str | None, sub_version: int,
                     expression_type: str) -> dict[str, str]:
        """PullMessageRequestHeader as makeCustomHeaderToNet writes it (RemotingCommand.request's stringify,
        written out: one pull per 32 messages is hot); a null subscription is left out."""
        fields = {
            "consumerGroup": group, "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
            "maxMsgNums": str(max_nums), "sysFlag": str(sys_flag), "commitOffset": str(commit_offset),
            "suspendTimeoutMillis": str(suspend_ms)}
        if subscription is not None:
            fields["subscription"] = subscription
        fields["subVersion"] = str(sub_version)
        fields["expressionType"] = expression_type
        return fields

    def _pull_result(self, resp: RemotingCommand, addr: str, what: str) -> PullResult:
        """PullResult of a PULL_MESSAGE answer (``MQClientAPIImpl.processPullResponse``): codes 0/19/20/21,
        anything else a BrokerResponseError; the four PullMessageResponseHeader longs."""
        status = _PULL_STATUS.get(resp.code)
        if status is None:
            raise BrokerResponseError(resp.code, resp.remark, addr=addr, request_code=RequestCode.PULL_MESSAGE,
                                      what=what)
        ext = resp.ext_fields or {}
        try:   # what int_field does, without its checks' calls; a field missing or not a number: _long says so
            nbo, low, high, broker_id = (int(ext["nextBeginOffset"]), int(ext["minOffset"]), int(ext["maxOffset"]),
                                         int(ext["suggestWhichBrokerId"]))
        except (KeyError, ValueError):
            nbo, low, high, broker_id = (self._long(resp, "nextBeginOffset", addr), self._long(resp, "minOffset", addr),
                                         self._long(resp, "maxOffset", addr),
                                         self._long(resp, "suggestWhichBrokerId", addr))
        if status is PullStatus.FOUND:
            return PullResult(status, nbo, low, high, broker_id, resp.body, body_buffer=resp.body_buffer)
        return PullResult(status, nbo, low, high, broker_id)

    async def pull(self, addr: str, *, group: str, topic: str, queue_id: int, offset: int, max_nums: int,
                   sys_flag: int, commit_offset: int = 0, suspend_ms: int = 0, subscription: str | None = None,
                   sub_version: int = 0, expression_type: str = "TAG",
                   timeout: float = 30.0, body_buffer: bool = False) -> PullResult:
        """PULL_MESSAGE (11). Codes 0/19/20/21 become a PullResult; any other raises BrokerResponseError.
        ``body_buffer``: a large body may come as ``PullResult.body_buffer`` (the bytearray it was received
        into) instead of a ``bytes`` copy in ``body``."""
        ch = self._channels.get(addr)
        template = None
        if ch is not None and not ch.closed and self.credentials is None and not log.isEnabledFor(logging.DEBUG):
            template = self._pull_request_template(group, topic, queue_id, subscription, expression_type)
        if template is None:   # signed (the signature covers every field), not connected yet, or logged in full
            fields = self._pull_fields(group, topic, queue_id, offset, max_nums, sys_flag, commit_offset, suspend_ms,
                                       subscription, sub_version, expression_type)
            req = RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=fields)
            resp = await self.invoke(addr, req, timeout, body_buffer=body_buffer)
        else:
            assert ch is not None
            opaque = next_opaque()
            frame = template.frame(opaque, offset, max_nums, sys_flag, commit_offset, suspend_ms, sub_version)
            resp = await ch.invoke_frame(opaque, RequestCode.PULL_MESSAGE, frame, timeout, body_buffer=body_buffer)
        return self._pull_result(resp, addr, f"pull {topic}:{queue_id}@{offset} for {group}")

    def _pull_request_template(self, group: str, topic: str, queue_id: int, subscription: str | None,
                               expression_type: str) -> RequestTemplate | None:
        """The PULL_MESSAGE frame :meth:`pull` sends for one queue and subscription, with queueOffset, maxMsgNums,
        sysFlag, commitOffset, suspendTimeoutMillis and subVersion (:data:`_PULL_VARYING`, in the header's order)
        left to fill in: a push consumer's pull costs a string format instead of a JSON encode (None when
        :meth:`RequestTemplate.make` cannot make one that writes encode_frame's bytes)."""
        key = (group, topic, queue_id, subscription, expression_type)
        templates = self._pull_request_templates
        template: RequestTemplate | None = templates.get(key, _NO_TEMPLATE)
        if template is _NO_TEMPLATE:
            if len(templates) >= _PULL_TEMPLATES:
                templates.clear()
            req = RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=self._pull_fields(
                group, topic, queue_id, 0, 0, 0, 0, 0, subscription, 0, expression_type))
            template = templates[key] = RequestTemplate.make(req, _PULL_VARYING)
        return template

    def _pull_template(self, group: str, topic: str, queue_id: int, sys_flag: int,
                       subscription: str) -> RequestTemplate | None:
        """The PULL_MESSAGE frame of one queue for any offset, count and opaque (None when signed: the
        signature covers every field)."""
        if self.credentials is not None:
            return None
        key = (group, topic, queue_id, sys_flag, subscription)
        templates = self._pull_templates
        if key not in templates:
            if len(templates) >= _PULL_TEMPLATES:
                templates.clear()
            req = RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=self._pull_fields(
                group, topic, queue_id, 0, 0, sys_flag, 0, 0, subscription, 0, "TAG"))
            templates[key] = RequestTemplate.make(req, ("queueOffset", "maxMsgNums"))
        return templates[key]

    async def pull_tiles(self, addr: str, *, group: str, topic: str, queue_id: int, tiles: Sequence[tuple[int, int]],
                         sys_flag: int, subscription: str, timeout: float = 30.0,
                         body_buffer: bool = False) -> list[PullResult | BaseException]:
        """PULL_MESSAGE of every ``(offset, maxMsgNums)`` of one queue, sent at once (no commit offset, no
        suspend): the answers in ``tiles`` order, each a PullResult (as :meth:`pull` makes it) or, for a pull
        left unanswered within ``timeout`` or by a lost connection, the error :meth:`pull` would raise
        (RemotingTimeoutError / RemotingConnectError naming the address). An error code raises
        BrokerResponseError.

        One request frame per pull from a template (:class:`RequestTemplate`; each encoded in full when the
        requests are signed), one timer and one future for all instead of one each (``Channel.start_request``).
        ``body_buffer``: as in :meth:`pull`."""
        if not tiles:
            return []
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        ch = await self.channel(addr, timeout)
        left = max(timeout - (loop.time() - t0), 0.001)
        template = self._pull_template(group, topic, queue_id, sys_flag, subscription)
        wait = _TileRound(loop, len(tiles))
        opaques: list[int] = []
        try:
            for i, (offset, max_nums) in enumerate(tiles):
                if template is not None:
                    opaque = next_opaque()
                    frame = template.frame(opaque, offset, max_nums)
                else:
                    req = self.signed(RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=self._pull_fields(
                        group, topic, queue_id, offset, max_nums, sys_flag, 0, 0, subscription, 0, "TAG")))
                    opaque = req.opaque = next_opaque()
                    frame = encode_frame(req)
                opaques.append(opaque)
                ch.start_request(opaque, frame, _TileWaiter(wait, i), body_buffer=body_buffer)
            timer = loop.call_later(left, wait.expire)
            try:
                await wait.future
            finally:
                timer.cancel()
        finally:
            for opaque in opaques:
                ch.forget(opaque)
        out: list[PullResult | BaseException] = []
        for (offset, _), opaque, resp, error in zip(tiles, opaques, wait.responses, wait.errors, strict=True):
            if resp is not None:
                out.append(self._pull_result(resp, addr, f"pull {topic}:{queue_id}@{offset} for {group}"))
            else:
                out.append(error or RemotingTimeoutError(
                    f"no response to PULL_MESSAGE (opaque {opaque}) within {left:g} s", addr=ch.addr,
                    code=RequestCode.PULL_MESSAGE, timeout_s=left))
        return out

    # ------------------------------------------------------------------------- offsets
    async def query_offset(self, addr: str, group: str, topic: str, queue_id: int,
                           timeout: float | None = None) -> int | None:
        """QUERY_CONSUMER_OFFSET (14): the committed offset, None when the broker answers 22."""
        req = RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET,
                                      {"consumerGroup": group, "topic": topic, "queueId": queue_id})
        resp = await self.invoke(addr, req, timeout)
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        self._check(resp, addr, req.code, f"offset of {group} on {topic}:{queue_id}")
        return self._long(resp, "offset", addr)

    async def update_offset(self, addr: str, group: str, topic: str, queue_id: int, offset: int, *,
                            oneway: bool = True, timeout: float | None = None) -> None:
        """UPDATE_CONSUMER_OFFSET (15), oneway by default (``RemoteBrokerOffsetStore.persistAll``)."""
        req = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": group, "topic": topic, "queueId": queue_id, "commitOffset": offset})
        if oneway:
            await self.invoke_oneway(addr, req, timeout)
            return
        resp = await self.invoke(addr, req, timeout)
        self._check(resp, addr, req.code, f"update offset of {group} on {topic}:{queue_id}")

    async def _queue_value(self, addr: str, code: int, topic: str, queue_id: int, name: str,
                           timeout: float | None, extra: dict[str, object] | None = None) -> int:
        req = RemotingCommand.request(code, {"topic": topic, "queueId": queue_id, **(extra or {})})
        resp = await self.invoke(addr, req, timeout)
        self._check(resp, addr, code, f"{name} of {topic}:{queue_id}")
        return self._long(resp, name, addr)

    async def max_offset(self, addr: str, topic: str, queue_id: int, timeout: float | None = None) -> int:
        return await self._queue_value(addr, RequestCode.GET_MAX_OFFSET, topic, queue_id, "offset", timeout)

    async def min_offset(self, addr: str, topic: str, queue_id: int, timeout: float | None = None) -> int:
        return await self._queue_value(addr, RequestCode.GET_MIN_OFFSET, topic, queue_id, "offset", timeout)

    async def search_offset(self, addr: str, topic: str, queue_id: int, ts_ms: int,
                            timeout: float | None = None) -> int:
        return await self._queue_value(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, topic, queue_id, "offset",
                                       timeout, {"timestamp": ts_ms})

    async def earliest_msg_store_time(self, addr: str, topic: str, queue_id: int,
                                      timeout: float | None = None) -> int:
        return await self._queue_value(addr, RequestCode.GET_EARLIEST_MSG_STORETIME, topic, queue_id, "timestamp",
                                       timeout)

    async def topic_stats(self, addr: str, topic: str, timeout: float | None = None) -> TopicStats:
        """GET_TOPIC_STATS_INFO (202; ``getTopicStatsInfo``): min and max offsets of the topic's queues on the
        broker at ``addr`` in one request, as a :class:`~rocketstream.client.topic_stats.TopicStats` (int64
        arrays; empty for a SUCCESS without a body). The broker lists queues ``0 .. writeQueueNums-1`` only
        (``AdminBrokerProcessor.getTopicStatsInfo``), so a route's readable queues may be more. Any code but
        SUCCESS (TOPIC_NOT_EXIST while the topic is being created, NO_PERMISSION under an ACL, ...) raises
        BrokerResponseError, a body that is no TopicStatsTable BodyError — both naming the address."""
        from rocketstream.client.topic_stats import empty_topic_stats, parse_topic_stats

        req = RemotingCommand.request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
        resp = await self.invoke(addr, req, timeout)
        self._check(resp, addr, req.code, f"stats of topic {topic}")
        if not resp.body:
            return empty_topic_stats()
        return parse_topic_stats(resp.body, topic, addr)

    # ------------------------------------------------------------------------- client management
    async def heartbeat(self, addr: str, data: dict[str, Any], timeout: float | None = None) -> int:
        """HEART_BEAT (34) with a HeartbeatData body; the broker's version (response ``version``)."""
        req = RemotingCommand.request(RequestCode.HEART_BEAT, None, json_body.dumps(data))
        resp = await self.invoke(addr, req, timeout)
        self._check(resp, addr, req.code, "heartbeat")
        self.broker_versions[addr] = resp.version
        return resp.version

    async def unregister(self, addr: str, client_id: str, producer_group: str | None = None,
                         consumer_group: str | None = None, timeout: float | None = None) -> None:
        req = RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, {
            "clientID": client_id, "producerGroup": producer_group, "consumerGroup": consumer_group})
        resp = await self.invoke(addr, req, timeout)
        self._check(resp, addr, req.code, f"unregister {client_id}")

    async def consumer_ids(self, addr: str, group: str, timeout: float | None = None) -> list[str]:
        """GET_CONSUMER_LIST_BY_GROUP (38); code 1 ("no consumer for this group") raises BrokerResponseError."""
        req = RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
        resp = await self.invoke(addr, req, timeout)
        self._check(resp, addr, req.code, f"consumer list of {group}")
        doc = json_body.loads(resp.body or b"{}", what="GetConsumerListByGroupResponseBody", addr=addr)
        ids = doc.get("consumerIdList") if isinstance(doc, dict) else None
        if not isinstance(ids, list):
            raise BodyError("consumer list body has no consumerIdList array", addr=addr)
        return [str(i) for i in ids]

    async def lock_batch(self, addr: str, group: str, client_id: str, mqs: Iterable[MessageQueue],
                         timeout: float | None = None) -> set[MessageQueue]:
        """LOCK_BATCH_MQ (41): the subset now locked by ``client_id``."""
        body = {"clientId": client_id, "consumerGroup": group, "mqSet": [_mq_json(m) for m in sorted(mqs)]}
        req = RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, None, json_body.dumps(body))
        resp = await self.invoke(addr, req, timeout)
        self._check(resp, addr, req.code, f"lock queues of {group}")
        doc = json_body.loads(resp.body or b"{}", what="LockBatchResponseBody", addr=addr)
        raw = doc.get("lockOKMQSet") if isinstance(doc, dict) else None
        return {_mq_from_json(m, addr) for m in (raw or [])}

    async def unlock_batch(self, addr: str, group: str, client_id: str, mqs: Iterable[MessageQueue], *,
                           oneway: bool = False, timeout: float | None = None) -> None:
        body = {"clientId": client_id, "consumerGroup": group, "mqSet": [_mq_json(m) for m in sorted(mqs)]}
        req = RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ, None, json_body.dumps(body))
        if oneway:
            await self.invoke_oneway(addr, req, timeout)
            return
        resp = await self.invoke(addr, req, timeout)
        self._check(resp, addr, req.code, f"unlock queues of {group}")

    async def send_back(self, addr: str, msg: MessageExt, group: str, delay_level: int, max_reconsume_times: int,
                        timeout: float | None = None) -> None:
        """CONSUMER_SEND_MSG_BACK (36); raises BrokerResponseError on any non-0 code."""
        req = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, {
            "offset": msg.commit_log_offset, "group": group, "delayLevel": delay_level,
            "originMsgId": msg.msg_id, "originTopic": msg.topic, "unitMode": False,
            "maxReconsumeTimes": max_reconsume_times})
        resp = await self.invoke(addr, req, timeout)
        self._check(resp, addr, req.code, f"send back {msg.msg_id} for {group}")

    async def view_message(self, addr: str, commit_log_offset: int, timeout: float | None = None) -> MessageExt:
        """VIEW_MESSAGE_BY_ID (33): the record at a commit-log offset."""
        req = RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": commit_log_offset})
        resp = await self.invoke(addr, req, timeout)
        self._check(resp, addr, req.code, f"view message at {commit_log_offset}")
        msgs = decode_messages(resp.body or b"", addr=addr)
        if not msgs:
            raise BodyError(f"view message at {commit_log_offset}: the body holds no record", addr=addr)
        return msgs[0]

    async def query_consume_queue(self, addr: str, topic: str, queue_id: int, index: int, count: int,
                                  group: str | None = None, timeout: float | None = None) -> Any:
        """QUERY_CONSUME_QUEUE (321; ``queryConsumeQueue``): the consume-queue units of ``topic``:``queue_id``
        from ``index`` as a :class:`~rocketstream.client.consume_queue_query.ConsumeQueueAnswer` (``sizes``,
        ``physic_offsets``, ``tags_codes`` int64 arrays). The broker answers at most ``count`` units (at most
        :data:`~rocketstream.client.consume_queue_query.MAX_QUERY_COUNT`) and none past the end of the
        consume-queue file holding ``index``; an index it does not hold is an answer with ``found`` False.
        A missing queue (SYSTEM_ERROR) or any other code raises BrokerResponseError, a malformed body
        BodyError — both naming the broker address, topic and queue."""
        from rocketstream.client.consume_queue_query import not_found, parse_query_consume_queue

        req = RemotingCommand.request(RequestCode.QUERY_CONSUME_QUEUE, {
            "topic": topic, "queueId": queue_id, "index": index, "count": count, "consumerGroup": group})
        resp = await self.invoke(addr, req, timeout)
        self._check(resp, addr, req.code, f"query consume queue {topic}:{queue_id} from index {index}")
        if not resp.body:
            return not_found(topic, queue_id, index, resp.remark)
        return parse_query_consume_queue(resp.body, topic, queue_id, index, addr=addr)


# ----------------------------------------------------------------------------- pull results
def decode_messages(body: bytes, *, broker_name: str = "", addr: str | None = None) -> list[MessageExt]:
    """``MessageDecoder.decodes(body)`` on the client: every record of a pull body, decompressed.

    Unlike Java (which stops silently at the first bad record) a record that does not decode raises
    BodyError naming its position; CRCs are not checked (Java's client does not either).
    """
    out: list[MessageExt] = []
    mv = memoryview(body)
    pos, n = 0, len(body)
    while pos < n:
        try:
            rec = decode_record(mv, pos, check_crc=False)
        except CorruptStoreError as exc:
            raise BodyError(f"pull body: record at byte {pos} does not decode: {exc}", addr=addr) from exc
        if rec is None:   # a BLANK record never belongs in a pull body
            raise BodyError(f"pull body: BLANK record at byte {pos}", addr=addr)
        data = rec.body
        if rec.sys_flag & FLAG_COMPRESSED:
            try:
                data = decompress_body(data, rec.sys_flag)
            except CorruptStoreError as exc:
                raise BodyError(f"pull body: record at byte {pos}: {exc}", addr=addr) from exc
        out.append(MessageExt.from_record(rec, data, broker_name))
        pos += rec.total_size
    return out


def process_pull_result(result: PullResult, broker_name: str,
                        tags_filter: SubscriptionData | Collection[str] | None = None,
                        *, addr: str | None = None,
                        decode: Callable[..., list[MessageExt]] | None = None) -> list[MessageExt]:
    """``PullAPIWrapper.processPullResult`` (``decode``: the body decoder, default :func:`decode_messages`):
    decode a FOUND body, keep messages whose TAGS is exactly one
    of the subscribed tags (none / "*" keeps all), set ``broker_name``, the MIN_OFFSET / MAX_OFFSET
    properties from the response and ``TRAN_MSG`` half messages' transaction id (UNIQ_KEY). The result is
    also stored in ``result.messages``; ``result.body`` is released."""
    if result.status is not PullStatus.FOUND or not result.body:
        result.messages = []
        result.body = None
        return result.messages
    msgs = (decode or decode_messages)(result.body, broker_name=broker_name, addr=addr)
    if isinstance(tags_filter, SubscriptionData):
        tags: Collection[str] | None = None if tags_filter.sub_all else tags_filter.tags
    else:
        tags = tags_filter or None
    if tags is not None:
        wanted = set(tags)
        msgs = [m for m in msgs if m.properties.get(PROPERTY_TAGS) in wanted]
    offsets = ((PROPERTY_MIN_OFFSET, str(result.min_offset)), (PROPERTY_MAX_OFFSET, str(result.max_offset)))
    for m in msgs:
        m.put_properties(offsets)   # MessageAccessor.putProperty, without decoding lazy properties
        if m.sys_flag & TRANSACTION_MASK == TRANSACTION_PREPARED and PROPERTY_UNIQ_KEY in m.properties:
            m.properties.setdefault("__transactionId__", m.properties[PROPERTY_UNIQ_KEY])
    result.messages = msgs
    result.body = None
    return msgs

