"""Our ACL-signed client against RocketMQ 5.3.3's auth 2.0 (issue 22), beside the Java clients.

5.3.3 has no ACL 1.0 (no ``plain_acl.yml``); its broker authenticates and authorizes with the ``rocketmq-auth``
module (broker.conf ``authenticationEnabled`` / ``authorizationEnabled``, users and ACLs kept in the broker's
RocksDB and made with mqadmin ``createUser`` / ``createAcl``). A remoting client still signs as 4.x did: the
``AclClientRPCHook`` of 5.3.3's client jar (``org.apache.rocketmq.acl.common``) with the user name as access key
and the password as secret key; the broker recomputes the signature over the extFields it received
(``DefaultAuthenticationContextBuilder``), so ``rocketstream.remoting.acl_signing`` needs no change.

What 5.3.3 answers (measured here; every refusal is response code 16, NO_PERMISSION, at once):

* no AccessKey: ``username cannot be null.``; an unknown user: ``User:<name> is not found.``; a wrong secret:
  ``check signature failed.`` (auth_audit.log logs the signature, never the secret);
* a known user without a policy: ``User:<name> has no permission to access Topic:<topic> from 127.0.0.1, no
  matched policies.`` (send, pull, query/update of offsets); a user with Pub,Sub on the topic and Sub on the
  group sends, pulls, commits, and runs push and lite-pull consumers;
* requests the authorization module does not map to a resource need only authentication: a user without any
  policy gets GET_MAX_OFFSET / GET_MIN_OFFSET / SEARCH_OFFSET_BY_TIMESTAMP, GET_TOPIC_STATS_INFO,
  GET_CONSUME_STATS, QUERY_CONSUME_QUEUE and VIEW_MESSAGE_BY_ID answered; LOCK_BATCH_MQ and
  GET_CONSUMER_LIST_BY_GROUP need Sub on the group (``... to access Group:<group> ..., no matched policies.``);
* mqadmin signs with ``<rocketmq.home.dir>/conf/tools.yml`` as 4.x did (the 5.3.3 dist ships none: unsigned,
  its broker calls get ``CODE: 16 DESC: username cannot be null.``); here the super user (``Super``, from
  ``initAuthenticationUser``) creates the users, the topic and the ACLs;
* the name server has no auth: unsigned route and cluster requests are answered (our client signs them
  anyway, as Java's hook does).

The Java producer (tests/java/AclScenario.java, compiled against 5.3.3's and 4.9.8's client jars) gets the
same codes and remarks. Producers retry code 16 (``DefaultMQProducer.retryResponseCodes`` lists
NO_PERMISSION), so a refused send fails after ``1 + retryTimesWhenSendFailed`` immediate attempts.

The distribution: ``$ROCKETSTREAM_RMQ5_DIST`` or ``../shared/rocketmq-5.3.3`` (tests/realbroker/peers.py
``find_dist5``); the module skips, naming why, without it or without Java.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from rocketstream.client import ConsumeConcurrentlyStatus, Credentials, LitePullConsumer, PushConsumer, SendStatus
from rocketstream.client.api import PULL_SYS_FLAG_SUBSCRIPTION, MQClientAPI
from rocketstream.client.common import MessageQueue, PullStatus
from rocketstream.client.producer import Producer
from rocketstream.errors import BrokerResponseError, SendFailedError
from rocketstream.remoting import RequestCode, ResponseCode
from tests.realbroker import peers

REPO = Path(__file__).resolve().parents[2]
ROOT = ("rsroot", "rsroot-Secret-5")            # the super user (initAuthenticationUser)
ALICE = ("alice", "alice-Secret-5")             # Pub,Sub on TOPIC and GROUP
BOB = ("bob", "bob-Secret-5")                   # a user without any policy
TOPIC, GROUP = "AuthTopic", "AuthGroup"
AUTH_CONF = {
    "authenticationEnabled": "true",
    "authenticationProvider": "org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider",
    "authenticationMetadataProvider":
        "org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider",
    "authorizationEnabled": "true",
    "authorizationProvider": "org.apache.rocketmq.auth.authorization.provider.DefaultAuthorizationProvider",
    "authorizationMetadataProvider":
        "org.apache.rocketmq.auth.authorization.provider.LocalAuthorizationMetadataProvider",
    "initAuthenticationUser": f'{{"username":"{ROOT[0]}","password":"{ROOT[1]}"}}',
    "innerClientAuthenticationCredentials": f'{{"accessKey":"{ROOT[0]}","secretKey":"{ROOT[1]}"}}',
}
NO_USERNAME = "username cannot be null."
BAD_SIGNATURE = "check signature failed."


def no_policy(user: str, topic: str = TOPIC) -> str:
    return f"User:{user} has no permission to access Topic:{topic} from 127.0.0.1, no matched policies."


def _mqadmin_all(home: Path, admin_home: Path, dist: Path, calls: list[list[str]]) -> None:
    """Run mqadmin calls at once (each a JVM), signed as ROOT (``<admin_home>/conf/tools.yml``); each must say
    "success" (mqadmin exits 0 after a refusal too)."""
    env = peers.server_env(dist)

    def start(args: list[str]) -> subprocess.Popen:
        return subprocess.Popen(peers.mqadmin_command(home, *args, jvm_opts=[f"-Drocketmq.home.dir={admin_home}"],
                                                      dist=dist), env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)

    procs = [start(args) for args in calls]
    deadline = time.monotonic() + 240
    for i, args in enumerate(calls):
        while True:
            out, _ = procs[i].communicate(timeout=180)
            # a loaded machine can make mqadmin's request time out before the broker answers: run it again
            if "RemotingTimeoutException" not in out or time.monotonic() > deadline:
                break
            procs[i] = start(args)
        assert procs[i].returncode == 0 and "success" in out, f"mqadmin {args}: {procs[i].returncode}\n{out[-3000:]}"


@pytest.fixture(scope="module")
def auth5(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    try:
        dist = peers.find_dist5()
        peers.find_java()
    except peers.JavaUnavailable as exc:
        pytest.skip(f"RocketMQ 5.x auth 2.0: {exc}")
    home = tmp_path_factory.mktemp("auth5")
    admin_home = home / "admin-home"
    (admin_home / "conf").mkdir(parents=True)
    (admin_home / "conf" / "tools.yml").write_text(f"accessKey: {ROOT[0]}\nsecretKey: {ROOT[1]}\n")
    ns = peers.start_namesrv(home, dist=dist)
    br = None
    try:
        # both JVMs boot at once (2 cores): the broker registers once the name server is up (_wait_route)
        br = peers.start_broker(home, ns.port, extra_conf=AUTH_CONF, dist=dist)
        ns.wait_ready()
        br.wait_ready()
        namesrv, broker = f"{peers.BIND}:{ns.port}", f"{peers.BIND}:{br.port}"
        base = ["-n", namesrv, "-b", broker]
        _mqadmin_all(home, admin_home, dist, [
            ["createUser", *base, "-u", ALICE[0], "-p", ALICE[1]],
            ["createUser", *base, "-u", BOB[0], "-p", BOB[1]],
            ["updateTopic", *base, "-t", TOPIC, "-r", "4", "-w", "4"]])
        # alice's policies in one call (Pub on a group means nothing): two createAcl calls for one subject at
        # once can leave only one of the policies (seen: alice later refused "... to access Group:AuthGroup ...")
        _mqadmin_all(home, admin_home, dist, [
            ["createAcl", *base, "-s", f"User:{ALICE[0]}", "-r", f"Topic:{TOPIC},Group:{GROUP}", "-a", "Pub,Sub",
             "-d", "Allow"]])
        _wait_route(namesrv, TOPIC)
        yield SimpleNamespace(dist=dist, home=home, namesrv=namesrv, broker=broker, broker_server=br)
    finally:
        if br is not None:
            br.kill()
        ns.kill()


def _wait_route(namesrv: str, topic: str, timeout: float = 60.0) -> None:
    """5.3.3's broker may skip its first registration (its README, "Known quirks"): wait for the route."""
    async def go() -> None:
        api = MQClientAPI(namesrv)      # unsigned: the 5.3.3 name server has no auth
        try:
            deadline = time.monotonic() + timeout
            while (await api.get_route(topic)) is None:
                assert time.monotonic() < deadline, f"no route for {topic} after {timeout:.0f} s"
                await asyncio.sleep(0.2)
        finally:
            await api.close()
    asyncio.run(go())


def _producer(auth5: SimpleNamespace, cred: Credentials | None, tag: str) -> Producer:
    return Producer(f"AuthProducer{tag}{time.monotonic_ns()}", namesrv=auth5.namesrv, credentials=cred,
                    send_msg_timeout=20)


def _denials(auth5: SimpleNamespace, user: str) -> list[str]:
    """auth_audit.log lines about ``user``: 5.3.3 logs each failed authentication and each denial there."""
    audit = auth5.broker_server.rocketmq_log("auth_audit.log")
    text = audit.read_text(errors="replace") if audit.is_file() else ""
    return [line for line in text.splitlines() if f"User:{user} " in line]


def test_a_signed_producer_offsets_and_admin_reads_pass(auth5: SimpleNamespace) -> None:
    with _producer(auth5, Credentials(*ALICE), "A") as good:
        first = good.send(TOPIC, b"signed for auth 2.0")
        batch = good.send_batch(TOPIC, [b"b1", b"b2"])
        assert (first.status, batch.status) == (SendStatus.SEND_OK, SendStatus.SEND_OK)
        inst, addr, q = good.instance, auth5.broker, first.queue.queue_id
        api = inst.api
        pulled = inst.run(api.pull(addr, group=GROUP, topic=TOPIC, queue_id=q, offset=first.queue_offset,
                                   max_nums=1, sys_flag=PULL_SYS_FLAG_SUBSCRIPTION, subscription="*", timeout=30), 40)
        assert pulled.status is PullStatus.FOUND and pulled.body and b"signed for auth 2.0" in pulled.body
        inst.run(api.update_offset(addr, GROUP, TOPIC, q, first.queue_offset + 1, oneway=False, timeout=30), 40)
        assert inst.run(api.query_offset(addr, GROUP, TOPIC, q, 30), 40) == first.queue_offset + 1
        assert inst.run(api.max_offset(addr, TOPIC, q, 30), 40) > first.queue_offset
        stats = inst.run(api.topic_stats(addr, TOPIC, 30), 40)
        assert list(stats.queue_ids) == [0, 1, 2, 3] and int(stats.max_offsets.sum()) >= 3
    assert _denials(auth5, ALICE[0]) == []


def test_signed_push_and_lite_pull_consumers_pass(auth5: SimpleNamespace) -> None:
    """Heartbeats, rebalance, pulls (the group's %RETRY% topic included) and offset commits of both consumers,
    signed as a user with Sub on the group and the topic: nothing is denied."""
    uniq = time.monotonic_ns()
    bodies = {f"consumed {uniq} {i}".encode() for i in range(4)}
    with _producer(auth5, Credentials(*ALICE), "C") as producer:
        for body in sorted(bodies):
            producer.send(TOPIC, body)
    cred = Credentials(*ALICE)
    seen: set[bytes] = set()
    push = PushConsumer(GROUP, namesrv=auth5.namesrv, credentials=cred, instance_name=f"push{uniq}",
                        consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    push.subscribe(TOPIC, "*")
    push.register_message_listener_concurrently(
        lambda msgs, ctx: seen.update(m.body for m in msgs) or ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    push.start()
    try:
        deadline = time.monotonic() + 60
        while not bodies <= seen and time.monotonic() < deadline:
            time.sleep(0.05)
        assert bodies <= seen, seen
    finally:
        push.shutdown()
    lite = LitePullConsumer(GROUP, namesrv=auth5.namesrv, credentials=cred, instance_name=f"lite{uniq}",
                            auto_commit=False)
    queues = [MessageQueue(TOPIC, "broker-a", q) for q in range(4)]
    lite.assign(queues)
    lite.start()
    try:
        for mq in queues:
            lite.seek(mq, 0)
        got: set[bytes] = set()
        deadline = time.monotonic() + 60
        while not bodies <= got and time.monotonic() < deadline:
            got |= {m.body for m in lite.poll(1.0)}
        assert bodies <= got, got
        lite.commit()
    finally:
        lite.shutdown()
    assert _denials(auth5, ALICE[0]) == []


@pytest.mark.parametrize(("cred", "remark"), [
    (Credentials(ALICE[0], "not-the-password"), BAD_SIGNATURE),
    (Credentials("carol", "whatever"), "User:carol is not found."),
    (None, NO_USERNAME),
    (Credentials(*BOB), no_policy(BOB[0])),
], ids=["wrong-secret", "unknown-user", "unsigned", "no-policy"])
def test_refusals_are_typed_at_once_and_name_broker_request_and_remark(auth5: SimpleNamespace, cred, remark) -> None:
    with _producer(auth5, cred, "R") as producer:
        t0 = time.monotonic()
        with pytest.raises(SendFailedError) as info:
            producer.send(TOPIC, b"refused")
        took = time.monotonic() - t0
        cause = info.value.__cause__
        assert isinstance(cause, BrokerResponseError), info.value
        assert (cause.code, cause.remark, cause.request_code) == (
            ResponseCode.NO_PERMISSION, remark, RequestCode.SEND_MESSAGE_V2)
        assert info.value.attempts == 3 and took < 15, took       # NO_PERMISSION is retried, each refused at once
        assert cause.addr == auth5.broker and auth5.broker in str(info.value) and remark in str(info.value)
        inst = producer.instance
        with pytest.raises(BrokerResponseError) as refused:
            inst.run(inst.api.query_offset(auth5.broker, GROUP, TOPIC, 0, 30), 40)
        assert (refused.value.code, refused.value.remark, refused.value.request_code) == (
            ResponseCode.NO_PERMISSION, remark, RequestCode.QUERY_CONSUMER_OFFSET)
        assert auth5.broker in str(refused.value)
        if cred is not None and cred.access_key == BOB[0]:
            # authenticated, and GET_MAX_OFFSET names no resource the authorization checks: answered
            assert inst.run(inst.api.max_offset(auth5.broker, TOPIC, 0, 30), 40) >= 0
            with pytest.raises(BrokerResponseError) as locked:
                inst.run(inst.api.lock_batch(auth5.broker, GROUP, "cid", [MessageQueue(TOPIC, "broker-a", 0)], 30),
                         40)
            assert locked.value.remark == no_policy(BOB[0]).replace(f"Topic:{TOPIC}", f"Group:{GROUP}")
            # what the consumer tests' "nothing denied" check reads: the denials are logged there
            deadline = time.monotonic() + 30
            while not any("is Deny Action = Pub" in line for line in _denials(auth5, BOB[0])):
                assert time.monotonic() < deadline, "no denial of bob's send in auth_audit.log"
                time.sleep(0.1)
    if cred is not None:
        assert cred.secret_key not in str(info.value) + repr(info.value) + str(refused.value)


# ------------------------------------------------------------------------------------------ the Java clients
@pytest.fixture(scope="module")
def acl_scenario(tmp_path_factory: pytest.TempPathFactory, auth5: SimpleNamespace) -> dict[str, tuple[Path, Path]]:
    """tests/java/AclScenario.java (a DefaultMQProducer with AclClientRPCHook) compiled against 5.3.3's client,
    and against 4.9.8's when that distribution is here: {"5": (classes, dist), "4": ...}."""
    dists = {"5": auth5.dist}
    try:
        dists["4"] = peers.find_dist()
    except peers.JavaUnavailable:
        pass
    out = {}
    for major, dist in dists.items():
        classes = peers.compile_java(tmp_path_factory.mktemp(f"acl-scenario-{major}"),
                                     REPO / "tests" / "java" / "AclScenario.java", dist=dist)
        out[major] = (classes, dist)
    return out


@pytest.mark.slow
def test_java_clients_get_what_ours_gets(auth5: SimpleNamespace, acl_scenario, tmp_path: Path) -> None:
    """The Java producers (5.3.3's client; 4.9.8's too) signed with AclClientRPCHook: accepted for alice,
    refused with the very code and remark our client gets (test above) otherwise."""
    java, _ = peers.find_java()
    cases = [("5", ALICE, "RESULT SEND_OK"), ("5", (ALICE[0], "not-the-password"),
                                              f"RESULT REJECTED code=16 remark={BAD_SIGNATURE}"),
             ("5", BOB, f"RESULT REJECTED code=16 remark={no_policy(BOB[0])}"),
             ("4", ALICE, "RESULT SEND_OK"), ("4", BOB, f"RESULT REJECTED code=16 remark={no_policy(BOB[0])}")]
    cases = [c for c in cases if c[0] in acl_scenario]
    def run(i: int, major: str, ak: str, sk: str) -> subprocess.Popen:
        classes, dist = acl_scenario[major]
        cmd = [str(java), "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dfile.encoding=UTF-8",
               f"-Duser.home={tmp_path}", f"-Drocketmq.client.logRoot={tmp_path}/client-logs-{i}",
               "-cp", f"{classes}:{dist}/lib/*", "AclScenario", "--namesrv", auth5.namesrv, "--ak", ak, "--sk", sk,
               "--topic", TOPIC, "--group", f"JavaAuthProducer{i}"]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                stdin=subprocess.DEVNULL)

    procs = [run(i, major, ak, sk) for i, (major, (ak, sk), _) in enumerate(cases)]
    deadline = time.monotonic() + 180
    for i, (major, (ak, sk), want) in enumerate(cases):
        while True:
            out, err = procs[i].communicate(timeout=120)
            result = [line for line in out.splitlines() if line.startswith("RESULT ")]
            # a loaded machine can make the Java client's 3 s requests time out (a route request then says "No
            # route info"; the route exists: the fixture waited for it): run that case again
            timed_out = result and ("No route info of this topic" in result[0] or "RemotingTimeoutException" in
                                    result[0])
            if not (timed_out and time.monotonic() < deadline):
                break
            procs[i] = run(i, major, ak, sk)
        assert result and result[0].startswith(want), (major, want, out[-2000:], err[-2000:])
        assert procs[i].returncode == (0 if want == "RESULT SEND_OK" else 3), (major, out, err[-2000:])
