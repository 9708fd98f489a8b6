"""TLS between us and Apache RocketMQ 4.9.8 (../shared/rocketmq-4.9.8, its README's "TLS" section), both ways:

* our client (``tls=TlsConfig(trust_cert_path=...)``) sends to and pulls from a 4.9.8 name server + broker in
  ``enforcing`` mode; a plain client, a client trusting another CA, get typed errors at once;
* mqadmin and the Java client (``-Dtls.enable=true -Dtls.client.authServer=true -Dtls.test.mode.enable=false
  -Dtls.client.trustCertPath=...``: without authServer a Java client trusts any certificate) against our
  ``rocketstream serve`` in ``enforcing`` mode (its broker registering with its name server over TLS:
  ``tls.enable``), and, slow, in ``permissive`` mode and with mutual TLS;
* slow: what 4.9.8's own ``permissive`` mode and ``need.client.auth=require`` do with our client (measured
  here: permissive takes TLS and plain on one port; require refuses a client without a certificate in the
  handshake and takes ours with one, JDK provider).

Each 4.9.8 process gets ``-Dtls.config.file`` naming an empty file (RocketMQ's TlsHelper would otherwise read
/etc/rocketmq/tls.properties, whose settings win over the -D flags). Certificates are made by the tests
(tests/remoting/tls_certs.py)."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from rocketstream.client import LitePullConsumer, Message, Producer
from rocketstream.client.api import MQClientAPI
from rocketstream.client.tls import TlsConfig
from rocketstream.errors import RemotingConnectError, TlsError
from tests.broker import java_fixtures
from tests.realbroker import peers
from tests.remoting.tls_certs import KEY_PASSWORD, Certs, make_certs

# The 4.9.8 TLS name server and broker boot (about half a minute of two JVMs on a loaded machine) alongside the
# tests before this module (tests/conftest.py START_EARLY_BEFORE / start_early), from the main thread (peers'
# children die with the thread that started them); the fixture waits for them.
START_EARLY_BEFORE = "tests/broker/test_offset_manager.py"
_EARLY: dict[str, object] = {}


def _certs(config) -> Certs:
    if "certs" not in _EARLY:
        _EARLY["certs"] = make_certs(config._tmp_path_factory.mktemp("tls-interop-certs"))
    return _EARLY["certs"]  # type: ignore[return-value]


def start_early(config) -> None:
    if "cluster" in _EARLY or shutil.which("openssl") is None:
        return
    try:
        peers.find_dist()
        peers.find_java()
    except peers.JavaUnavailable:
        return
    certs = _certs(config)
    home = config._tmp_path_factory.mktemp("java-tls")
    opts = java_server_opts(certs, "enforcing")
    ns = peers.start_namesrv(home, opts)
    broker = peers.start_broker(home, ns.port, extra_conf=dict(java_fixtures.SCENARIO_CONF), jvm_opts=opts)
    _EARLY["cluster"] = (ns, broker)

    def stop() -> None:
        broker.kill()
        ns.kill()
    config.add_cleanup(stop)


@pytest.fixture(scope="module")
def certs(request) -> Certs:
    return _certs(request.config)


def _empty_tls_file(certs: Certs) -> Path:
    empty = certs.dir / "empty-tls.properties"
    empty.touch()
    return empty


def java_server_opts(certs: Certs, mode: str, client_auth: str = "none") -> list[str]:
    """The -D flags of a 4.9.8 name server or broker serving TLS (dist README "TLS")."""
    return [f"-Dtls.server.mode={mode}", "-Dtls.test.mode.enable=false",
            f"-Dtls.server.certPath={certs.srv_cert}", f"-Dtls.server.keyPath={certs.srv_key}",
            f"-Dtls.server.need.client.auth={client_auth}", f"-Dtls.server.trustCertPath={certs.ca}",
            "-Dtls.enable=true", f"-Dtls.client.trustCertPath={certs.ca}",
            f"-Dtls.config.file={_empty_tls_file(certs)}"]


def java_client_opts(certs: Certs, trust: Path, *, client_cert: bool = False) -> str:
    """JVM options of a Java client (smoke, mqadmin: tests/realbroker/peers.py, as RMQ_JAVA_OPTS of the dist's
    bin/ scripts, split at spaces) that verifies the server against ``trust``."""
    opts = ["-Dtls.enable=true", "-Dtls.client.authServer=true", "-Dtls.test.mode.enable=false",
            f"-Dtls.client.trustCertPath={trust}", f"-Dtls.config.file={_empty_tls_file(certs)}"]
    if client_cert:
        opts += [f"-Dtls.client.certPath={certs.client_cert}", f"-Dtls.client.keyPath={certs.client_key}"]
    return " ".join(opts)


def _trusting(certs: Certs, **kw) -> TlsConfig:
    return TlsConfig(trust_cert_path=str(certs.ca), **kw)


async def _route(namesrv: str, tls: TlsConfig | None, topic: str = "TBW102"):
    # a cold JVM's first TLS handshakes are slow on a loaded machine: more than the 3 s defaults
    api = MQClientAPI(namesrv, tls=tls, connect_timeout=15)
    try:
        return await api.get_route(topic, timeout=15)
    finally:
        await api.close()


def route(namesrv: str, tls: TlsConfig | None, topic: str = "TBW102"):
    return asyncio.run(asyncio.wait_for(_route(namesrv, tls, topic), 30))


# ------------------------------------------------------------------------------- our client -> 4.9.8
@pytest.fixture(scope="module")
def java_tls_cluster(certs, request):
    """A 4.9.8 name server + broker, both ``tls.server.mode=enforcing``; the broker registers over TLS."""
    java_fixtures._require_java()
    start_early(request.config)
    ns, broker = _EARLY["cluster"]  # type: ignore[misc]
    ns.wait_ready()
    broker.wait_ready()
    namesrv = f"{peers.BIND}:{ns.port}"
    deadline = time.monotonic() + 60   # the broker may have booted before the name server listened
    while route(namesrv, _trusting(certs), "TBW102") is None:
        assert time.monotonic() < deadline, "the 4.9.8 broker never registered with its TLS name server"
        time.sleep(0.5)
    return namesrv, f"{peers.BIND}:{broker.port}"


def test_our_client_over_tls_to_4_9_8_enforcing(certs, java_tls_cluster):
    namesrv, broker_addr = java_tls_cluster
    topic = f"TlsTopic{time.monotonic_ns() % 10**9}"
    tls = _trusting(certs)
    with Producer("tls_pg", namesrv=namesrv, tls=tls) as producer:
        results = [producer.send(Message(topic, f"tls-{i}".encode(), keys=f"k{i}")) for i in range(4)]
    assert all(r.status.name == "SEND_OK" for r in results)
    mqs = {r.queue for r in results}
    consumer = LitePullConsumer("tls_cg", namesrv=namesrv, tls=tls, auto_commit=False)
    consumer.assign(sorted(mqs, key=lambda mq: mq.queue_id))
    consumer.start()
    try:
        for mq in mqs:
            consumer.seek_to_begin(mq)
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 4 and time.monotonic() < deadline:
            got += [m.body for m in consumer.poll(1.0)]
        assert sorted(got) == [f"tls-{i}".encode() for i in range(4)]
        assert consumer.instance.api.open_channel(broker_addr)._transport.get_extra_info("ssl_object") is not None
    finally:
        consumer.shutdown()


def test_mismatches_with_4_9_8_enforcing_fail_at_once(certs, java_tls_cluster):
    namesrv, broker_addr = java_tls_cluster
    started = time.monotonic()
    # a plain client: 4.9.8's HandshakeHandler closes the connection without an answer
    with pytest.raises(RemotingConnectError, match="enforces TLS") as err:
        route(namesrv, None)
    assert namesrv in str(err.value)
    # a client that trusts another CA
    with pytest.raises(TlsError, match="certificate verify failed") as err:
        route(namesrv, TlsConfig(trust_cert_path=str(certs.other_ca)))
    assert namesrv in str(err.value)
    # the certificate names 127.0.0.1; "localhost" is another host (Java clients never check this)
    with pytest.raises(TlsError, match="mismatch"):
        route(namesrv.replace(peers.BIND, "localhost"), _trusting(certs))
    assert route(namesrv.replace(peers.BIND, "localhost"), _trusting(certs, verify_hostname=False)) is not None
    assert time.monotonic() - started < 10   # each at once: none waits out a 3 s request timeout


# ------------------------------------------------------------------------- Java clients -> ours
def _mqadmin(home: Path, namesrv: str, java_opts: str, *args: str) -> subprocess.CompletedProcess:
    return peers.mqadmin(home / "mqadmin", *args, "-n", namesrv, jvm_opts=java_opts.split(), timeout=120)


def _cluster_list_until_listed(target: java_fixtures.BrokerTarget, java_opts: str,
                               timeout: float = 90) -> subprocess.CompletedProcess:
    """mqadmin clusterList until it lists the broker or ``timeout`` passes: a Java client's 3 s request timeout
    can pass while a loaded machine warms up its JVM's TLS (RemotingTimeoutException), which says nothing of
    the server."""
    deadline = time.monotonic() + timeout
    while True:
        res = _mqadmin(target.home, target.namesrv_addr, java_opts, "clusterList")
        if target.broker_addr in res.stdout or time.monotonic() > deadline \
                or "RemotingTimeoutException" not in res.stdout + res.stderr:
            return res


def _smoke(home: Path, namesrv: str, java_opts: str, attempts: int = 3) -> subprocess.CompletedProcess:
    """bin/smoke (a Java producer, lite-pull and push consumer); run again, up to ``attempts`` times, only when
    it failed on a Java client's request timeout (see _cluster_list_until_listed)."""
    try:
        argv = peers.smoke_command(home / "smoke", "--namesrv", namesrv, "--count", "20", "--auto-create",
                                   "--timeout-s", "90", jvm_opts=java_opts.split())
    except peers.JavaUnavailable as exc:      # an Apache binary release has no smoke program
        pytest.skip(str(exc))
    for _ in range(attempts):
        res = subprocess.run(argv, env=peers.server_env(peers.find_dist()), capture_output=True, text=True,
                             timeout=240)
        if res.returncode == 0 or "RemotingTimeoutException" not in res.stdout + res.stderr:
            break
    return res


def _serve_tls(certs: Certs, home: Path, mode: str, client_auth: str = "none") -> java_fixtures.BrokerTarget:
    """``rocketstream serve`` with TLS in its broker.conf: both ports serve ``mode`` (an encrypted key and its
    password); the broker registers with its name server over TLS, trusting our CA (and presenting the client
    certificate when it is required)."""
    conf = dict(java_fixtures.SCENARIO_CONF)
    conf.update({"tls.server.mode": mode, "tls.server.certPath": str(certs.srv_cert),
                 "tls.server.keyPath": str(certs.srv_key_encrypted), "tls.server.keyPassword": KEY_PASSWORD,
                 "tls.server.trustCertPath": str(certs.ca),
                 "tls.server.need.client.auth": client_auth,
                 "tls.enable": "true", "tls.client.trustCertPath": str(certs.ca),
                 # quick transaction check-backs (the exactly-once sink's responder over TLS)
                 "transactionCheckInterval": "1000", "transactionTimeOut": "1000", "transactionCheckMax": "1000"})
    if client_auth == "require":
        conf.update({"tls.client.certPath": str(certs.client_cert), "tls.client.keyPath": str(certs.client_key)})
    return java_fixtures.start_ours(home, conf)


@pytest.fixture(scope="module")
def ours_enforcing(certs, tmp_path_factory):
    java_fixtures._require_java()
    target = _serve_tls(certs, tmp_path_factory.mktemp("ours-tls-enforcing"), "enforcing")
    try:
        yield target
    finally:
        assert java_fixtures.stop(target, clean=True) == [0], target.log_tail()


def test_mqadmin_over_tls_to_ours_enforcing(certs, ours_enforcing):
    target = ours_enforcing
    res = _cluster_list_until_listed(target, java_client_opts(certs, certs.ca))
    assert res.returncode == 0, res.stdout + res.stderr
    assert target.broker_addr in res.stdout and "broker-a" in res.stdout   # registered over TLS, listed over TLS
    assert KEY_PASSWORD not in target.logs[0].read_text(errors="replace")


@pytest.mark.slow
def test_java_client_over_tls_to_ours_enforcing(certs, ours_enforcing):
    target = ours_enforcing
    res = _smoke(target.home, target.namesrv_addr, java_client_opts(certs, certs.ca))
    assert res.returncode == 0 and "SMOKE PASSED" in res.stdout, res.stdout[-3000:] + res.stderr[-2000:]
    # the same client trusting another CA fails the handshake (tls.client.authServer=true)
    bad = _mqadmin(target.home, target.namesrv_addr, java_client_opts(certs, certs.other_ca), "clusterList")
    assert target.broker_addr not in bad.stdout, bad.stdout
    # mqadmin without TLS: our name server closes the connection; nothing is listed
    plain = _mqadmin(target.home, target.namesrv_addr, f"-Dtls.config.file={_empty_tls_file(certs)}", "clusterList")
    assert target.broker_addr not in plain.stdout
    # our server closes the connection as soon as its first byte is not a TLS handshake's: the Java client's
    # send fails (RemotingSendRequestException over a ClosedChannelException) instead of waiting out its timeout
    assert "command failed" in plain.stderr and re.search(r"Remoting\w*Exception", plain.stderr), plain.stderr
    log = target.logs[0].read_text(errors="replace")
    assert "a plain (non-TLS) client while this server runs in TLS enforcing mode" in log


@pytest.mark.slow
def test_java_clients_to_ours_permissive_and_mutual(certs, tmp_path):
    java_fixtures._require_java()
    target = _serve_tls(certs, tmp_path / "permissive", "permissive")
    try:
        res = _smoke(target.home, target.namesrv_addr, java_client_opts(certs, certs.ca))
        assert res.returncode == 0 and "SMOKE PASSED" in res.stdout, res.stdout[-3000:] + res.stderr[-2000:]
        plain = _cluster_list_until_listed(target, f"-Dtls.config.file={_empty_tls_file(certs)}")
        assert target.broker_addr in plain.stdout, plain.stdout + plain.stderr
    finally:
        assert java_fixtures.stop(target, clean=True) == [0], target.log_tail()
    target = _serve_tls(certs, tmp_path / "mutual", "enforcing", client_auth="require")
    try:
        ok = _cluster_list_until_listed(target, java_client_opts(certs, certs.ca, client_cert=True))
        assert target.broker_addr in ok.stdout, ok.stdout + ok.stderr
        no_cert = _mqadmin(target.home, target.namesrv_addr, java_client_opts(certs, certs.ca), "clusterList")
        assert target.broker_addr not in no_cert.stdout, no_cert.stdout
    finally:
        assert java_fixtures.stop(target, clean=True) == [0], target.log_tail()


# ------------------------------------------------------------------ 4.9.8's permissive and require modes
@pytest.mark.slow
def test_4_9_8_permissive_disabled_and_mutual_tls_with_our_client(certs, tmp_path):
    java_fixtures._require_java()
    ns = peers.start_namesrv(tmp_path, java_server_opts(certs, "permissive"))
    try:
        ns.wait_ready()
        addr = f"{peers.BIND}:{ns.port}"
        # permissive: plain and TLS on one port (TBW102 has no route without a broker: TOPIC_NOT_EXIST, answered)
        assert route(addr, None) is None
        assert route(addr, _trusting(certs)) is None
    finally:
        ns.kill()
    ns = peers.start_namesrv(tmp_path)   # the dist's own settings: tls.server.mode=disabled
    try:
        ns.wait_ready()
        addr = f"{peers.BIND}:{ns.port}"
        started = time.monotonic()
        with pytest.raises(TlsError, match="TLS handshake failed") as err:   # its decoder closes the connection
            route(addr, _trusting(certs))
        assert time.monotonic() - started < 10 and addr in str(err.value)
    finally:
        ns.kill()
    ns = peers.start_namesrv(tmp_path, java_server_opts(certs, "enforcing", client_auth="require"))
    try:
        ns.wait_ready()
        addr = f"{peers.BIND}:{ns.port}"
        assert route(addr, _trusting(certs, cert_path=str(certs.client_cert), key_path=str(certs.client_key))) is None
        with pytest.raises(TlsError, match="bad certificate|certificate"):   # TLS 1.2: refused in the handshake
            route(addr, _trusting(certs))
    finally:
        ns.kill()



# ------------------------------------------------------------------ Spark's source and sink over TLS
def _spark_tls(certs: Certs, namesrv: str, topic: str, **extra: str) -> dict[str, str]:
    return {"nameServer": namesrv, "topic": topic, "tls.enable": "true",
            "tls.client.trustCertPath": str(certs.ca), **extra}


@pytest.mark.spark
@pytest.mark.parametrize("broker", ["java", "ours"])
def test_spark_reads_and_writes_over_tls(spark, certs, broker, request):
    """The Spark sink writes and the source reads back over TLS (RocketMQ's option names), through an enforcing
    4.9.8 cluster and our enforcing ``serve``; the same read without the TLS options fails with a typed error
    instead of hanging."""
    if broker == "java":
        namesrv, _ = request.getfixturevalue("java_tls_cluster")
    else:
        namesrv = request.getfixturevalue("ours_enforcing").namesrv_addr
    topic = f"SparkTls{broker}{time.monotonic_ns() % 10**9}"
    bodies = [f"tls-row-{i}" for i in range(12)]
    (spark.createDataFrame([(b,) for b in bodies], "body string").coalesce(1).write.format("rocketmq")
     .options(**_spark_tls(certs, namesrv, topic)).mode("append").save())
    rows = spark.read.format("rocketmq").options(**_spark_tls(certs, namesrv, topic)).load() \
        .select("topic", "body").collect()
    assert sorted(r.body.decode() for r in rows) == sorted(bodies)
    assert {r.topic for r in rows} == {topic}
    # a plain reader of the enforcing cluster: a clear connection error naming the name server, at once
    t0 = time.monotonic()
    with pytest.raises(Exception) as err:
        spark.read.format("rocketmq").options(nameServer=namesrv, topic=topic).load().collect()
    assert time.monotonic() - t0 < 60
    assert namesrv in str(err.value) and "TLS" in str(err.value), str(err.value)[-2000:]
    # and a reader trusting another CA is refused in the handshake
    with pytest.raises(Exception) as err:
        spark.read.format("rocketmq").options(
            **_spark_tls(certs, namesrv, topic, **{"tls.client.trustCertPath": str(certs.other_ca)})).load().collect()
    assert "certificate verify failed" in str(err.value), str(err.value)[-2000:]


@pytest.mark.slow   # ~50 s under load: a streaming query, then a check-back round (the default run is near 15 min)
@pytest.mark.spark
def test_exactly_once_sink_over_tls_to_ours_enforcing(spark, certs, ours_enforcing, tmp_path):
    """exactlyOnce over TLS: the tasks' halves, the driver's END_TRANSACTIONs and the check-back responder (its
    own process, the TLS settings through its stdin) all connect over TLS to our enforcing ``serve``; halves of
    a batch recorded as unresolved are committed by the broker's check-back through the responder."""
    import json

    from rocketstream.client import Message
    from rocketstream.spark import exactly_once as eos
    from rocketstream.spark.secured import SecuredOptions

    namesrv = ours_enforcing.namesrv_addr
    topic, group = f"EosTls{time.monotonic_ns() % 10**9}", f"EosTlsPG{time.monotonic_ns() % 10**9}"
    src, ck = tmp_path / "in", tmp_path / "ck"
    src.mkdir()
    (src / "part-0.json").write_text("".join(json.dumps({"id": i}) + "\n" for i in range(10)))
    frame = spark.readStream.schema("id long").json(str(src)) \
        .selectExpr("cast(concat('eos-', cast(id as string)) as binary) as body")
    query = (frame.writeStream.format("rocketmq")
             .options(**{**_spark_tls(certs, namesrv, topic), "producerGroup": group, "exactlyOnce": "true",
                         "checkpointLocation": str(ck)})
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None and not query.isActive
    read = spark.read.format("rocketmq").options(**_spark_tls(certs, namesrv, topic))

    def bodies() -> list[bytes]:
        return sorted(bytes(r.body) for r in read.load().select("body").collect())
    assert bodies() == sorted(f"eos-{i}".encode() for i in range(10))
    state = ck / eos.STATE_DIR
    sender = eos.HalfSender(namesrv, group, eos.transaction_group(str(ck)), 15_000, 4 << 20, 7,
                            SecuredOptions(None, _trusting(certs), None))
    try:
        sender.send([Message(topic, f"late-{i}".encode()) for i in range(3)], None)
    finally:
        sender.close()
    eos.CommitRecord(state).write(7, [sender.out.attempt], eos.UNRESOLVED, "0:0")
    want = sorted([f"eos-{i}".encode() for i in range(10)] + [f"late-{i}".encode() for i in range(3)])
    deadline = time.monotonic() + 120
    while (got := bodies()) != want:
        assert time.monotonic() < deadline, f"the check-back did not commit the unresolved halves: {got}"
        time.sleep(1.0)
    assert "COMMIT_MESSAGE" in (state / "responder.log").read_text(errors="replace")


# ------------------------------------------------------------------------- the command line over TLS
def test_cli_produce_and_consume_over_tls_to_ours_enforcing(certs, ours_enforcing, capsys):
    """``--tls --tls-trust-cert`` on produce and consume through our enforcing ``serve``; without ``--tls`` the
    same command fails with the TLS hint (exit 2), at once."""
    from rocketstream import cli

    namesrv = ours_enforcing.namesrv_addr
    topic, group = f"CliTls{time.monotonic_ns() % 10**9}", f"CliTlsG{time.monotonic_ns() % 10**9}"
    tls = ["--tls", "--tls-trust-cert", str(certs.ca)]
    assert cli.main(["produce", "--namesrv", namesrv, "--topic", topic, "--count", "6", "--json", *tls]) == 0
    out = capsys.readouterr().out
    assert '"sent": 6' in out.splitlines()[-1], out[-1000:]
    assert cli.main(["consume", "--namesrv", namesrv, "--group", group, "--topic", topic, "--from", "first",
                     "--count", "6", "--idle-timeout", "30", "--json", *tls]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert len(rows) == 6
    t0 = time.monotonic()
    assert cli.main(["produce", "--namesrv", namesrv, "--topic", topic, "--count", "1"]) == 2
    err = capsys.readouterr().err
    assert time.monotonic() - t0 < 30 and "TLS" in err, err[-1000:]


def test_spark_reads_over_tls_by_pattern_in_a_namespace(spark, certs, java_tls_cluster):
    """A Spark network read from the 4.9.8 TLS cluster (enforcing): the name server's topic list, the routes and
    the pulls all over TLS, and ``topicPattern`` matched among the namespace's topics by their user's names."""
    from rocketstream.spark.brokers import query_topics
    from rocketstream.spark.options import parse_options

    namesrv, _broker_addr = java_tls_cluster
    topic = f"TlsPat{time.monotonic_ns() % 10**9}"
    tls = _trusting(certs)
    with Producer("tls_pat_pg", namesrv=namesrv, tls=tls, namespace="tlsns") as producer:
        sent = sorted(producer.send(Message(topic, f"p-{i}".encode())).msg_id for i in range(4))
    options = {"nameServer": namesrv, "topicPattern": "TlsPat.*", "namespace": "tlsns", "tls.enable": "true",
               "tls.client.trustCertPath": str(certs.ca), "requestTimeoutMs": "15000"}
    deadline = time.monotonic() + 60   # 4.9.8 registers an auto-created topic with the name server a moment later
    while topic not in query_topics(parse_options(options, streaming=False)):
        assert time.monotonic() < deadline, f"the name server never listed tlsns%{topic}"
        time.sleep(0.5)
    rows = spark.read.format("rocketmq").options(**options).load() \
        .where(f"topic = '{topic}'").select("topic", "msgId", "body").collect()
    assert sorted(r.msgId for r in rows) == sent
    assert {r.topic for r in rows} == {topic} and sorted(bytes(r.body) for r in rows) == [b"p-%d" % i for i in range(4)]
