"""Client-side ACL 1.0 signing against Java (issue 22).

* Parity: every kind of request ``MQClientAPI(credentials=)`` sends is rebuilt by tests/java/SignProbe.java the
  way a 4.9.8 Java client builds it (its custom-header class, with the same values), signed by
  ``AclClientRPCHook`` and written by ``makeCustomHeaderToNet``: the extFields must be equal, Signature included,
  byte for byte (that pins the field order, the UTF-8 content and the body).
* Both brokers with ACL on, found through their name servers: our ``rocketstream serve`` with aclEnable=true
  and the real 4.9.8 broker with aclEnable=true (tests/broker/test_acl.py's fixtures, its plain_acl.yml): a
  signed Producer sends, signed pulls and offset calls pass; a wrong secret, or a topic the account may not
  publish to, fails at once with the broker's AclException remark, naming the broker.

The producer retries an ACL refusal as Java's ``DefaultMQProducerImpl.sendDefaultImpl`` does: the broker
answers SYSTEM_ERROR (``NettyRemotingAbstract.processRequestCommand`` turns the AclException into it), which
``DefaultMQProducer.retryResponseCodes`` lists, so a send is tried ``1 + retryTimesWhenSendFailed`` times
(each refused at once) and then fails ("Send [3] times, still failed") with the broker's answer as cause.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from rocketstream.client import ConsumeConcurrentlyStatus, Credentials, LitePullConsumer, PushConsumer, SendStatus
from rocketstream.client.api import PULL_SYS_FLAG_SUBSCRIPTION, MQClientAPI
from rocketstream.client.common import MessageQueue, PullStatus
from rocketstream.client.producer import Producer
from rocketstream.errors import BrokerResponseError, SendFailedError
from rocketstream.remoting import RequestCode, ResponseCode
from tests.broker.test_acl import (  # noqa: F401  (fixtures)
    AK,
    SIGNATURE_FAILED,
    SK,
    _java,
    java_classes,
    our_acl_broker,
    real_acl_broker,
)
from tests.client.test_credentials import (
    KINDS,
    TOKEN,
    Recorder,
    every_kind_of_request,
    recorder_server,
    unsigned,
)
from tests.realbroker import peers

REPO = Path(__file__).resolve().parents[2]
ACL_PREFIX = "org.apache.rocketmq.acl.common.AclException"


@pytest.fixture(scope="module")
def sign_probe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        dist = peers.find_dist()
        _, javac = peers.find_java()
    except peers.JavaUnavailable as exc:
        pytest.skip(str(exc))
    out = tmp_path_factory.mktemp("sign-probe")
    res = subprocess.run([str(javac), "-nowarn", "-encoding", "UTF-8", "-d", str(out), "-cp", f"{dist}/lib/*",
                          str(REPO / "tests" / "java" / "SignProbe.java")], capture_output=True, text=True)
    if res.returncode != 0:
        raise peers.PeerError(f"javac failed:\n{res.stdout}\n{res.stderr}")
    return out


def _captured(cred: Credentials) -> list[Any]:
    async def go() -> list[Any]:
        recorder = Recorder()
        async with recorder_server(recorder) as server:
            api = MQClientAPI(server.address, credentials=cred)
            try:
                return await every_kind_of_request(api, server.address, recorder)
            finally:
                await api.close()

    return asyncio.run(asyncio.wait_for(go(), 120))


def test_signatures_equal_java_aclclientrpchook_for_every_request(sign_probe: Path, tmp_path: Path) -> None:
    creds = [Credentials(AK, SK), Credentials("cl\u00e9-d'acc\u00e8s", "s\u00e9cret-\U0001F600-key", TOKEN)]
    cases, sent = [], []
    for cred in creds:
        for (kind, code, header), req in zip(KINDS, _captured(cred), strict=True):
            case: dict[str, Any] = {"code": code, "fields": unsigned(req.ext_fields or {}), "ak": cred.access_key,
                                    "sk": cred.secret_key}
            if header is not None:
                case["header"] = header
            if req.body:
                case["body"] = base64.b64encode(req.body).decode()
            if cred.security_token is not None:
                case["token"] = cred.security_token
            cases.append(case)
            sent.append((kind, req))
    res = _java(sign_probe, tmp_path, "SignProbe", stdin="".join(json.dumps(c) + "\n" for c in cases))
    out = [json.loads(line) for line in res.stdout.decode("utf-8").splitlines() if line.startswith("{")]
    assert res.returncode == 0 and len(out) == len(cases), (res.stdout[-3000:], res.stderr[-3000:])
    for (kind, req), java in zip(sent, out, strict=True):
        assert "error" not in java, (kind, java)
        # the same extFields: Java's header sends no field we leave out, and the signature is the same
        assert java["fields"] == req.ext_fields, kind
    assert {kind for kind, _ in sent} == {kind for kind, _, _ in KINDS}


# ------------------------------------------------------------------------------------------ both brokers
def _scenarios(namesrv: str, broker_addr: str) -> None:
    """A signed Producer and MQClientAPI calls against a broker with tests/broker/test_acl.py's ACL_YML (the
    RocketMQ account: AclTopic and topicB PUB|SUB, topicC SUB only, groupB PUB|SUB)."""
    uniq = time.monotonic_ns()
    good = Producer(f"credProducer{uniq}", namesrv=namesrv, credentials=Credentials(AK, SK), send_msg_timeout=20)
    with good:
        first = good.send("AclTopic", b"signed body")
        again = good.send("AclTopic", b"signed again")          # the fast path, from this thread
        batch = good.send_batch("AclTopic", [b"b1", b"b2"])
        assert (first.status, again.status, batch.status) == (SendStatus.SEND_OK,) * 3
        inst = good.instance
        addr = inst.broker_addr(first.queue.broker_name)
        assert addr is not None and addr.rsplit(":", 1)[1] == broker_addr.rsplit(":", 1)[1]
        api = inst.api
        q = first.queue.queue_id
        deadline = time.monotonic() + 30   # 4.9.8 writes the consume-queue unit after answering the send
        while inst.run(api.max_offset(addr, "AclTopic", q, 30), 40) <= first.queue_offset:
            assert time.monotonic() < deadline, "the first send not dispatched to its consume queue in 30 s"
            time.sleep(0.02)
        pulled = inst.run(api.pull(addr, group="groupB", topic="AclTopic", queue_id=q, offset=first.queue_offset,
                                   max_nums=1, sys_flag=PULL_SYS_FLAG_SUBSCRIPTION, subscription="*", timeout=30), 40)
        assert pulled.status is PullStatus.FOUND and pulled.body and b"signed body" in pulled.body
        inst.run(api.update_offset(addr, "groupB", "AclTopic", q, first.queue_offset + 1, oneway=False, timeout=30), 40)
        assert inst.run(api.query_offset(addr, "groupB", "AclTopic", q, 30), 40) == first.queue_offset + 1
        assert inst.run(api.max_offset(addr, "AclTopic", q, 30), 40) > first.queue_offset

        # no PUB on topicC: every attempt refused at once, then SendFailedError with the broker's answer
        t0 = time.monotonic()
        with pytest.raises(SendFailedError) as info:
            good.send("topicC", b"not allowed")
        took = time.monotonic() - t0
        cause = info.value.__cause__
        assert isinstance(cause, BrokerResponseError) and cause.code == ResponseCode.SYSTEM_ERROR
        assert cause.remark and cause.remark.startswith(ACL_PREFIX) and "topicC" in cause.remark
        assert info.value.attempts == 3 and took < 15, took
        assert cause.remark in str(info.value) and cause.addr is not None and cause.addr in str(info.value)

    _signed_consumers(namesrv, uniq, first.queue.broker_name)

    wrong = Producer(f"credProducerBad{uniq}", namesrv=namesrv, credentials=Credentials(AK, "wrongsecret"),
                     send_msg_timeout=20)
    with wrong:
        t0 = time.monotonic()
        with pytest.raises(SendFailedError) as info:
            wrong.send("AclTopic", b"wrong secret")
        took = time.monotonic() - t0
        cause = info.value.__cause__
        assert isinstance(cause, BrokerResponseError) and (cause.code, cause.remark) == (
            ResponseCode.SYSTEM_ERROR, SIGNATURE_FAILED)
        assert cause.request_code == RequestCode.SEND_MESSAGE_V2 and info.value.attempts == 3 and took < 15, took
        assert cause.addr is not None and cause.addr.rsplit(":", 1)[1] == broker_addr.rsplit(":", 1)[1]
        inst = wrong.instance
        with pytest.raises(BrokerResponseError) as refused:
            inst.run(inst.api.query_offset(cause.addr, "groupB", "AclTopic", 0, 30), 40)
        assert refused.value.remark == SIGNATURE_FAILED and cause.addr in str(refused.value)
        assert refused.value.request_code == RequestCode.QUERY_CONSUMER_OFFSET


def _signed_consumers(namesrv: str, uniq: int, broker_name: str) -> None:
    """A PushConsumer and a LitePullConsumer with ``credentials=`` (ConsumerConfig.credentials) read what the
    signed producer sent to AclTopic as groupB (the account's SUB group): routes, heartbeats, pulls and offset
    calls all signed."""
    cred = Credentials(AK, SK)
    seen: set[bytes] = set()
    push = PushConsumer("groupB", namesrv=namesrv, credentials=cred, instance_name=f"push{uniq}",
                        consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    assert push.config.credentials is cred and SK not in repr(push.config)
    push.subscribe("AclTopic", "*")
    push.register_message_listener_concurrently(
        lambda msgs, ctx: seen.update(m.body for m in msgs) or ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    push.start()
    # groupB's offset of the first message's queue was committed past it above: the group starts after it
    later = {b"signed again", b"b1", b"b2"}
    try:
        deadline = time.monotonic() + 60
        while not later <= seen and time.monotonic() < deadline:
            time.sleep(0.05)
        assert later <= seen, seen
    finally:
        push.shutdown()
    lite = LitePullConsumer("groupB", namesrv=namesrv, credentials=cred, instance_name=f"lite{uniq}",
                            auto_commit=False)
    queues = [MessageQueue("AclTopic", broker_name, q) for q in range(4)]
    lite.assign(queues)
    lite.start()
    try:
        for mq in queues:
            lite.seek(mq, 0)
        got: set[bytes] = set()
        deadline = time.monotonic() + 60
        while not later | {b"signed body"} <= got and time.monotonic() < deadline:
            got |= {m.body for m in lite.poll(1.0)}
        assert later | {b"signed body"} <= got, got
    finally:
        lite.shutdown()


def test_signed_clients_against_our_acl_broker(our_acl_broker) -> None:  # noqa: F811
    _scenarios(our_acl_broker.namesrv_addr, our_acl_broker.broker_addr)


def test_signed_clients_against_the_real_4_9_8_acl_broker(real_acl_broker) -> None:  # noqa: F811
    """The 4.9.8 name server gets signed requests too (Java's hook signs them) and answers them as usual."""
    _scenarios(real_acl_broker.namesrv, real_acl_broker.broker)
