"""Client-side ACL 1.0 signing (issue 22): ``Credentials``, ``MQClientAPI(credentials=)`` on the wire, against our
broker's ACL hook (in process), and secrets kept out of logs, errors and reprs.

The Java parity of the signatures and the runs against both brokers with a name server are in
tests/client/test_credentials_java.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pickle
import threading
import time
import traceback
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstream import client as client_pkg
from rocketstream.client import Credentials, Message
from rocketstream.client.api import PULL_SYS_FLAG_SUBSCRIPTION, MQClientAPI
from rocketstream.client.common import PullStatus
from rocketstream.client.instance import MQClientInstance
from rocketstream.client.producer import Producer
from rocketstream.errors import BrokerResponseError, MQClientError, OptionError, RemotingError
from rocketstream.remoting import RemotingCommand, RemotingServer, RequestCode, ResponseCode, json_body
from rocketstream.remoting.acl_signing import calc_signature, java_sorted, signing_content
from tests.broker import brokerutil
from tests.broker.test_acl import ACL_YML, AK, SIGNATURE_FAILED, SK

SECRET = "s3cr3t-\u00dcn\u00efque-KEY-42"      # distinctive: grepped for in logs, errors and reprs
TOKEN = "tok-\u00dcn\u00efque-77"
ACL_PREFIX = "org.apache.rocketmq.acl.common.AclException"


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 120))


# ------------------------------------------------------------------------------------------ Credentials
def test_credentials_public_and_hide_the_secret_and_token() -> None:
    assert client_pkg.Credentials is Credentials and "Credentials" in client_pkg.__all__
    c = Credentials("RocketMQ", SECRET, TOKEN)
    for text in (repr(c), str(c), f"{c}", f"{c!r}", repr([c]), repr({"c": c})):
        assert SECRET not in text and TOKEN not in text, text
        assert "RocketMQ" in text
    assert repr(Credentials("ak", SECRET)) == "Credentials(access_key='ak', secret_key=<hidden>)"
    assert (c.access_key, c.secret_key, c.security_token) == ("RocketMQ", SECRET, TOKEN)


def test_credentials_immutable_comparable_and_pickled_on_purpose() -> None:
    c = Credentials("RocketMQ", SECRET, TOKEN)
    with pytest.raises(AttributeError):
        c.secret_key = "other"     # type: ignore[misc]
    with pytest.raises(AttributeError):
        del c.access_key
    assert c == Credentials("RocketMQ", SECRET, TOKEN) and hash(c) == hash(Credentials("RocketMQ", SECRET, TOKEN))
    assert c != Credentials("RocketMQ", SECRET) and c != Credentials("RocketMQ", SECRET + "x", TOKEN)
    # Spark ships readers to executors: a pickle round trip keeps what signing needs
    back = pickle.loads(pickle.dumps(c))
    assert back == c and back.secret_key == SECRET and back.security_token == TOKEN


@pytest.mark.parametrize("args, option", [
    (("", SECRET), "access_key"), ((None, SECRET), "access_key"), (("ak", ""), "secret_key"),
    (("ak", b"bytes-secret-value"), "secret_key"), (("ak", SECRET, ""), "security_token"),
    (("ak", SECRET, 12345678), "security_token")])
def test_credentials_bad_values_are_option_errors_without_the_secret(args: tuple, option: str) -> None:
    with pytest.raises(OptionError) as info:
        Credentials(*args)
    assert info.value.option == option
    assert "bytes-secret-value" not in str(info.value) and "12345678" not in str(info.value)


def test_clients_take_only_credentials() -> None:
    with pytest.raises(OptionError) as info:
        MQClientAPI("127.0.0.1:1", credentials=("ak", SECRET))   # type: ignore[arg-type]
    assert info.value.option == "credentials" and SECRET not in str(info.value)
    with pytest.raises(OptionError) as info:
        Producer("pg", namesrv="127.0.0.1:1", credentials={"accessKey": "ak"})   # type: ignore[arg-type]
    assert info.value.option == "credentials"


def test_instances_are_kept_apart_by_credentials() -> None:
    """Java keeps the first client's RPC hook for a client id; here other credentials get their own instance
    (and connections), the same ones the same instance."""
    name = f"cred-{time.monotonic_ns()}"
    a = MQClientInstance.get("127.0.0.1:1", name, credentials=Credentials("ak", SECRET))
    assert MQClientInstance.get("127.0.0.1:1", name, credentials=Credentials("ak", SECRET)) is a
    b = MQClientInstance.get("127.0.0.1:1", name, credentials=Credentials("ak", SECRET + "-2"))
    plain = MQClientInstance.get("127.0.0.1:1", name)
    assert len({id(a), id(b), id(plain)}) == 3
    assert a.api.credentials == Credentials("ak", SECRET) and plain.api.credentials is None
    assert Producer("pg", namesrv="127.0.0.1:1", credentials=a.api.credentials).credentials is a.api.credentials
    for inst in (a, b, plain):
        assert SECRET not in repr(inst)
        MQClientInstance._registry.pop((inst.namesrv, inst.instance_name, inst.api.credentials, inst.api.tls), None)


# ------------------------------------------------------------------------------------------ on the wire
class Recorder:
    """A peer that records every request and answers as a broker / name server would (enough for the calls
    of :func:`every_kind_of_request`); ``calls_back`` makes it ask the client something (a broker-initiated
    request) before answering a HEART_BEAT, and keeps the client's answer."""

    def __init__(self, calls_back: bool = False) -> None:
        self.requests: list[RemotingCommand] = []
        self.calls_back = calls_back
        self.client_answers: list[RemotingCommand] = []
        self.oneway_seen = asyncio.Event()

    async def __call__(self, channel: Any, request: RemotingCommand) -> RemotingCommand | None:
        self.requests.append(request)
        if request.is_oneway:
            self.oneway_seen.set()
            return None
        code = request.code
        if code == RequestCode.HEART_BEAT and self.calls_back:
            ask = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO,
                                          {"consumerGroup": "g", "clientId": "c", "jstackEnable": False})
            self.client_answers.append(await channel.invoke(ask, 10))
        if code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            return request.response(ResponseCode.SUCCESS, fields={"msgId": "00" * 16, "queueId": 0, "queueOffset": 0})
        if code == RequestCode.PULL_MESSAGE:
            return request.response(ResponseCode.PULL_NOT_FOUND, fields={
                "nextBeginOffset": 0, "minOffset": 0, "maxOffset": 0, "suggestWhichBrokerId": 0})
        if code == RequestCode.QUERY_CONSUMER_OFFSET:
            return request.response(ResponseCode.QUERY_NOT_FOUND, "not found")
        if code in (RequestCode.GET_MAX_OFFSET, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP):
            return request.response(ResponseCode.SUCCESS, fields={"offset": 0})
        if code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, "No topic route info")
        if code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
            return request.response(ResponseCode.SUCCESS, body=json_body.dumps({"consumerIdList": []}))
        return request.response(ResponseCode.SUCCESS)


@contextlib.asynccontextmanager
async def recorder_server(recorder: Recorder) -> AsyncIterator[RemotingServer]:
    server = RemotingServer(name="recorder")
    server.default_processor = recorder
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


# (what MQClientAPI sent, the Java header class a 4.9.8 client sends it with; None: no custom header)
HEADERS = "org.apache.rocketmq.common.protocol.header."
KINDS: list[tuple[str, int, str | None]] = [
    ("route", RequestCode.GET_ROUTEINFO_BY_TOPIC, HEADERS + "namesrv.GetRouteInfoRequestHeader"),
    ("send", RequestCode.SEND_MESSAGE_V2, HEADERS + "SendMessageRequestHeaderV2"),
    ("send batch", RequestCode.SEND_BATCH_MESSAGE, HEADERS + "SendMessageRequestHeaderV2"),
    ("pull", RequestCode.PULL_MESSAGE, HEADERS + "PullMessageRequestHeader"),
    ("query offset", RequestCode.QUERY_CONSUMER_OFFSET, HEADERS + "QueryConsumerOffsetRequestHeader"),
    ("update offset", RequestCode.UPDATE_CONSUMER_OFFSET, HEADERS + "UpdateConsumerOffsetRequestHeader"),
    ("update offset oneway", RequestCode.UPDATE_CONSUMER_OFFSET, HEADERS + "UpdateConsumerOffsetRequestHeader"),
    ("max offset", RequestCode.GET_MAX_OFFSET, HEADERS + "GetMaxOffsetRequestHeader"),
    ("search offset", RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, HEADERS + "SearchOffsetRequestHeader"),
    ("consumer ids", RequestCode.GET_CONSUMER_LIST_BY_GROUP, HEADERS + "GetConsumerListByGroupRequestHeader"),
    ("heartbeat", RequestCode.HEART_BEAT, None),
    ("unregister", RequestCode.UNREGISTER_CLIENT, HEADERS + "UnregisterClientRequestHeader"),
]


async def every_kind_of_request(api: MQClientAPI, addr: str, recorder: Recorder) -> list[RemotingCommand]:
    """One request of each of :data:`KINDS`, sent through ``api`` to ``addr`` (name server and broker alike);
    what arrived, in :data:`KINDS` order. Non-ASCII and non-BMP values exercise the UTF-8 content and order."""
    topic, group = "T\u00f3pico-\U0001F600", "gr\u00fcppe"
    assert await api.get_route(topic, 10) is None
    await api.send(addr, "b", Message(topic, "corps \u00e9 \U0001F600".encode(), tags="t\u00e9",
                                      keys="k1 k2", properties={"UNIQ_KEY": "AC11000100002A9F0000000000000001"}),
                   0, producer_group=group, timeout=10)
    await api.send_batch(addr, "b", [Message(topic, b"one"), Message(topic, b"two")], 1, producer_group=group,
                         timeout=10)
    await api.pull(addr, group=group, topic=topic, queue_id=2, offset=17, max_nums=32, sys_flag=0x5,
                   commit_offset=16, suspend_ms=15000, subscription="t\u00e9 || b", sub_version=1700000000000,
                   timeout=10)
    assert await api.query_offset(addr, group, topic, 3, 10) is None
    await api.update_offset(addr, group, topic, 3, 42, oneway=False, timeout=10)
    await api.update_offset(addr, group, topic, 3, 43, oneway=True, timeout=10)
    await asyncio.wait_for(recorder.oneway_seen.wait(), 30)
    await api.max_offset(addr, topic, 3, 10)
    await api.search_offset(addr, topic, 3, 1700000000123, 10)
    assert await api.consumer_ids(addr, group, 10) == []
    await api.heartbeat(addr, {"clientID": "127.0.0.1@x", "producerDataSet": [{"groupName": group}],
                               "consumerDataSet": []}, 10)
    await api.unregister(addr, "127.0.0.1@x", producer_group=group, timeout=10)
    assert [r.code for r in recorder.requests] == [code for _, code, _ in KINDS]
    return list(recorder.requests)


def unsigned(fields: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in fields.items() if k not in ("AccessKey", "Signature", "SecurityToken")}


@pytest.mark.parametrize("token", [None, TOKEN])
def test_every_request_is_signed_on_the_wire(token: str | None) -> None:
    """AccessKey, SecurityToken (when set) and Signature on every request (name server and broker calls,
    oneway included); the signature is the broker's recomputation over what arrived (acl_signing's recipe,
    pinned to Java by test_credentials_java.py)."""
    cred = Credentials(AK, SECRET, token)

    async def go() -> tuple[list[RemotingCommand], list[RemotingCommand]]:
        signed_rec, plain_rec = Recorder(), Recorder()
        async with recorder_server(signed_rec) as s1, recorder_server(plain_rec) as s2:
            api = MQClientAPI(s1.address, credentials=cred)
            plain = MQClientAPI(s2.address)
            try:
                return (await every_kind_of_request(api, s1.address, signed_rec),
                        await every_kind_of_request(plain, s2.address, plain_rec))
            finally:
                await api.close()
                await plain.close()

    signed, plain = run(go())
    for (kind, _, _), req, bare in zip(KINDS, signed, plain, strict=True):
        f = dict(req.ext_fields or {})
        assert f["AccessKey"] == AK, kind
        assert f.get("SecurityToken") == token, kind
        assert f["Signature"] == calc_signature(signing_content(f, req.body), SECRET), kind
        assert req.is_oneway == (kind == "update offset oneway"), kind
        # nothing else changes: the unsigned client sends the same fields (but the born timestamp of a send)
        assert "AccessKey" not in (bare.ext_fields or {}) and "Signature" not in (bare.ext_fields or {}), kind
        drop = {"g"} if kind.startswith("send") else set()
        assert {k: v for k, v in unsigned(f).items() if k not in drop} == {
            k: v for k, v in (bare.ext_fields or {}).items() if k not in drop}, kind
    # the signature covers the body: same fields, other body -> another signature
    send = signed[1]
    assert send.body and calc_signature(signing_content(send.ext_fields or {}, send.body + b"x"), SECRET) != \
        (send.ext_fields or {})["Signature"]


def test_the_callers_request_is_not_changed_and_from_thread_sends_are_signed() -> None:
    """``invoke_from_thread`` (the producer's fast path) signs too; the caller's RemotingCommand stays as it
    was built (it never holds the token, whoever keeps or prints it)."""
    cred = Credentials(AK, SECRET, TOKEN)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def on_loop(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(60)

    recorder = Recorder()
    server_cm = recorder_server(recorder)
    server = on_loop(server_cm.__aenter__())
    api = MQClientAPI(server.address, credentials=cred)
    try:
        on_loop(api.channel(server.address, 10))
        req, _ = api.send_request(Message("TopicX", b"hello"), 0, producer_group="pg")
        before = dict(req.ext_fields or {})
        result = api.send_from_thread(server.address, "b", "TopicX", req, "u", 10, loop.call_soon_threadsafe)
        assert result is not None and result.queue_offset == 0
        assert req.ext_fields == before and "SecurityToken" not in repr(req) and TOKEN not in repr(req)
        on_loop(api.invoke(server.address, req, 10))
        assert req.ext_fields == before
        assert len(recorder.requests) == 2
        for got in recorder.requests:
            f = got.ext_fields or {}
            assert f["SecurityToken"] == TOKEN
            assert f["Signature"] == calc_signature(signing_content(f, got.body), SECRET)
            assert unsigned(f) == before
    finally:
        on_loop(api.close())
        on_loop(server_cm.__aexit__(None, None, None))
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_answers_to_broker_requests_are_not_signed() -> None:
    """A request the broker sends us (here GET_CONSUMER_RUNNING_INFO) gets a response: Java signs no response
    (its hook's doAfterResponse does nothing), neither do we."""
    recorder = Recorder(calls_back=True)
    seen: list[RemotingCommand] = []

    def on_request(channel: Any, request: RemotingCommand) -> RemotingCommand:
        seen.append(request)
        return request.response(ResponseCode.SUCCESS, fields={"answer": "1"}, body=b"{}")

    async def go() -> None:
        async with recorder_server(recorder) as server:
            api = MQClientAPI(server.address, on_request=on_request, credentials=Credentials(AK, SECRET))
            try:
                await api.heartbeat(server.address, {"clientID": "c", "producerDataSet": [], "consumerDataSet": []},
                                    10)
            finally:
                await api.close()

    run(go())
    assert [r.code for r in seen] == [RequestCode.GET_CONSUMER_RUNNING_INFO]
    assert len(recorder.client_answers) == 1
    answer = recorder.client_answers[0]
    assert answer.is_response and answer.ext_fields == {"answer": "1"}
    assert "Signature" in (recorder.requests[0].ext_fields or {})   # while the request itself was signed


# ------------------------------------------------------------------------------------------ our broker's ACL
@pytest.fixture
def acl_home(tmp_path: Path) -> Path:
    (tmp_path / "store" / "conf").mkdir(parents=True)
    (tmp_path / "store" / "conf" / "plain_acl.yml").write_text(ACL_YML)
    return tmp_path


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.monotonic()
    return fn(), time.monotonic() - t0


def test_signed_calls_against_our_acl_broker(acl_home: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Our broker with aclEnable=true (the hook the real 4.9.8 broker is checked against in tests/broker): the
    RocketMQ account may write and read topicB with groupB; sends, pulls and offsets signed by MQClientAPI pass,
    a oneway offset update too; a wrong secret or a topic the account may not use is a BrokerResponseError at
    once naming the broker, the request and the broker's remark; a refused oneway update changes nothing."""
    caplog.set_level(logging.DEBUG)
    good, bad = Credentials(AK, SK), Credentials(AK, SECRET)

    async def go() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with brokerutil.broker(acl_home, acl_enable=True) as b:
            addr = b.broker_addr
            api = MQClientAPI("127.0.0.1:1", credentials=good)
            wrong = MQClientAPI("127.0.0.1:1", credentials=bad)
            unsigned_api = MQClientAPI("127.0.0.1:1")
            try:
                sent = await api.send(addr, "b", Message("topicB", b"signed body"), 0, producer_group="groupB",
                                      timeout=30)
                out["sent"] = sent
                pulled = await api.pull(addr, group="groupB", topic="topicB", queue_id=0, offset=0, max_nums=32,
                                        sys_flag=PULL_SYS_FLAG_SUBSCRIPTION, subscription="*", timeout=30)
                out["pulled"] = pulled
                out["max"] = await api.max_offset(addr, "topicB", 0, 30)
                await api.update_offset(addr, "groupB", "topicB", 0, 1, oneway=False, timeout=30)
                out["committed"] = await api.query_offset(addr, "groupB", "topicB", 0, 30)
                await wrong.update_offset(addr, "groupB", "topicB", 0, 5, oneway=True, timeout=30)
                # a request answered on the same connection after the oneway: the oneway has been handled
                with pytest.raises(BrokerResponseError):
                    await wrong.max_offset(addr, "topicB", 0, 30)
                out["after refused oneway"] = b.offsets.query_offset("groupB", "topicB", 0)
                await api.update_offset(addr, "groupB", "topicB", 0, 2, oneway=True, timeout=30)
                # a oneway is answered by nothing: wait for the broker's table (a deadline, no sleep)
                deadline = time.monotonic() + 30
                while b.offsets.query_offset("groupB", "topicB", 0) != 2 and time.monotonic() < deadline:
                    await asyncio.sleep(0.02)
                out["after oneway"] = b.offsets.query_offset("groupB", "topicB", 0)
                errors: dict[str, tuple[BaseException, float]] = {}
                for name, call in (
                        ("wrong secret", lambda: wrong.max_offset(addr, "topicB", 0, 30)),
                        ("wrong secret send", lambda: wrong.send(addr, "b", Message("topicB", b"x"), 0,
                                                                 producer_group="groupB", timeout=30)),
                        ("unsigned", lambda: unsigned_api.max_offset(addr, "topicB", 0, 30)),
                        ("no PUB", lambda: api.send(addr, "b", Message("topicC", b"x"), 0, producer_group="groupB",
                                                    timeout=30)),
                        ("denied pull", lambda: api.pull(addr, group="groupB", topic="topicA", queue_id=0, offset=0,
                                                         max_nums=1, sys_flag=PULL_SYS_FLAG_SUBSCRIPTION,
                                                         subscription="*", timeout=30))):
                    t0 = time.monotonic()
                    try:
                        await call()
                    except BrokerResponseError as exc:
                        errors[name] = (exc, time.monotonic() - t0)
                out["errors"] = errors
            finally:
                for a in (api, wrong, unsigned_api):
                    await a.close()
        return out

    out = run(go())
    assert out["sent"].queue_offset == 0
    assert out["pulled"].status is PullStatus.FOUND and out["pulled"].body
    assert out["max"] == 1 and out["committed"] == 1
    assert out["after refused oneway"] == 1 and out["after oneway"] == 2
    errors = out["errors"]
    assert set(errors) == {"wrong secret", "wrong secret send", "unsigned", "no PUB", "denied pull"}
    for name, (exc, took) in errors.items():
        assert exc.code == ResponseCode.SYSTEM_ERROR and exc.remark and exc.remark.startswith(ACL_PREFIX), name
        assert exc.addr and exc.addr in str(exc) and exc.remark in str(exc), name
        assert took < 10, (name, took)   # an answer, not a timeout (30 s) or a retry loop
    assert errors["wrong secret"][0].remark == SIGNATURE_FAILED
    assert errors["wrong secret"][0].request_code == RequestCode.GET_MAX_OFFSET
    assert errors["wrong secret send"][0].request_code == RequestCode.SEND_MESSAGE_V2
    assert "send to topicB@b" in str(errors["wrong secret send"][0])
    assert "topicC" in str(errors["no PUB"][0]) and "topicA" in str(errors["denied pull"][0])
    _no_secret_anywhere(caplog, [exc for exc, _ in errors.values()], [Credentials(AK, SECRET, TOKEN)])


def _no_secret_anywhere(caplog: pytest.LogCaptureFixture, errors: list[BaseException], objects: list[Any]) -> None:
    # MQClientAPI.invoke logs every signed request at DEBUG: without such a line the check would pass vacuously
    assert any("request to" in r.getMessage() for r in caplog.records), "DEBUG logging captured no request"
    texts = [r.getMessage() for r in caplog.records] + [caplog.text]
    for exc in errors:
        texts += [str(exc), repr(exc), "".join(traceback.format_exception(exc))]
        cause = exc.__cause__
        while cause is not None:
            texts += [str(cause), repr(cause)]
            cause = cause.__cause__
    texts += [repr(o) for o in objects] + [str(o) for o in objects]
    leaked = [t[:300] for t in texts if SECRET in t or TOKEN in t]
    assert not leaked, leaked


def test_producer_with_credentials_never_shows_the_secret(acl_home: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``Producer(..., credentials=)`` through a client instance with DEBUG logging on: no secret or token in
    the log, the producer's, instance's or API's repr, or a failure's text."""
    caplog.set_level(logging.DEBUG)
    p = Producer("pg", namesrv="127.0.0.1:9", credentials=Credentials(AK, SECRET, TOKEN), send_msg_timeout=2)
    p.start()
    try:
        with pytest.raises((RemotingError, MQClientError)) as info:
            p.send("topicB", b"x")
        objects = [p, p.instance, p.instance.api, p.credentials, vars(p)]
    finally:
        p.shutdown()
    _no_secret_anywhere(caplog, [info.value], objects)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(st.characters(), max_size=4), max_size=8))
def test_java_order_shortcut_equals_utf16_order(keys: list[str]) -> None:
    """``java_sorted`` sorts keys without characters outside the BMP as Python does: the same order as Java's
    ``String.compareTo`` (UTF-16 code units), which it uses for the others."""
    assert java_sorted(keys) == sorted(keys, key=lambda k: k.encode("utf-16-be", "surrogatepass"))
