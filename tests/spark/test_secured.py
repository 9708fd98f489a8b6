"""The Spark source and sink against secured clusters: our broker and the real 4.9.8 with ``aclEnable=true``
(options ``accessKey`` / ``secretKey`` / ``securityToken`` and ``namespace``); a streaming query with a
``consumerGroup`` known to the brokers as a consumer (heartbeats, its ``%RETRY%`` route, commits read back
through that route as ``mqadmin consumerProgress -g`` reads them); a wrong secret or a missing permission is
the broker's answer at once; and no secret shows anywhere Spark or we show something: ``explain``, the
query plans (what Spark's SQL tab shows: its status store's plan descriptions), streaming progress, errors,
and the JVM's log (a file appender on Spark's log4j for the module).

The real 5.3.3 broker (``../shared/rocketmq-5.3.3``; slow): a streaming query's group commits, and
``mqadmin consumerProgress -g`` shows diff 0.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from rocketstream import cli
from rocketstream.client import Credentials, Producer
from rocketstream.client.api import MQClientAPI
from rocketstream.errors import BrokerResponseError
from rocketstream.spark.secured import SecuredOptions
from tests.client.scenario_util import unique
from tests.realbroker import acl_peers, peers

AK, SK, TOKEN = "sparkuser", "spark-SECRET-93kq", "spark-TOKEN-x71v"
READER_AK, READER_SK = "sparkreader", "reader-SECRET-p0w2"
WRONG = "WRONG-secret-5521"
SECRETS = (SK, TOKEN, READER_SK, WRONG)
NS = "nsSec"
ACL_YML = acl_peers.two_accounts_yml(AK, SK, READER_AK, READER_SK)
N = 24
# the transaction check service every second, for halves older than a second (the exactly-once sink's check-back)
TX_CONF = {"transactionCheckInterval": "1000", "transactionTimeOut": "1000", "transactionCheckMax": "1000"}
SIGNATURE_FAILED = f"Check signature failed for accessKey={AK}"


def no_secret(text: str, where: str) -> None:
    for secret in SECRETS:
        at = text.find(secret)
        assert at < 0, f"{secret[:6]}... shows in {where}: ...{text[max(0, at - 300):at]}<the secret>"


@pytest.fixture(scope="module")
def spark_log(spark, tmp_path_factory: pytest.TempPathFactory):
    """Spark's JVM log (log4j root, at the session's level) copied to a file for this module."""
    path = tmp_path_factory.mktemp("spark-log") / "spark.log"
    jvm = spark._jvm
    ctx = jvm.org.apache.logging.log4j.LogManager.getContext(False)
    config = ctx.getConfiguration()
    layout = jvm.org.apache.logging.log4j.core.layout.PatternLayout.createDefaultLayout(config)
    appender = (jvm.org.apache.logging.log4j.core.appender.FileAppender.newBuilder().withFileName(str(path))
                .setName("rocketstream-secured-test").setLayout(layout).setConfiguration(config).build())
    appender.start()
    config.addAppender(appender)
    config.getRootLogger().addAppender(appender, None, None)
    ctx.updateLoggers()
    try:
        yield path
    finally:
        config.getRootLogger().removeAppender("rocketstream-secured-test")
        ctx.updateLoggers()
        appender.stop()


@contextmanager
def _ours(home: Path, yml: str, extra_conf: dict[str, str]) -> Iterator[SimpleNamespace]:
    with acl_peers.ours_with_acl(home, yml, extra_conf) as served:
        yield SimpleNamespace(namesrv=served.namesrv_addr, broker=f"127.0.0.1:{served.broker_port}")


@pytest.fixture(scope="module", params=["ours", "java"])
def acl(request, tmp_path_factory: pytest.TempPathFactory):
    """An ACL-enabled name server + broker and a topic of N messages in namespace NS (sent signed)."""
    home = tmp_path_factory.mktemp(f"secured-{request.param}")
    with (_ours if request.param == "ours" else acl_peers.java_with_acl)(home, ACL_YML, TX_CONF) as cluster:
        topic = unique("SecT")
        creds = Credentials(AK, SK, TOKEN)
        with Producer(unique("SecPG"), namesrv=cluster.namesrv, credentials=creds) as producer:
            sent = [producer.send(f"{NS}%{topic}", f"secured-{i}".encode()) for i in range(N)]
        cluster.kind, cluster.topic, cluster.sent, cluster.home = request.param, topic, sent, home
        yield cluster


def options(acl, **extra: str) -> dict[str, str]:
    return {"nameServer": acl.namesrv, "topic": acl.topic, "accessKey": AK, "secretKey": SK,
            "securityToken": TOKEN, "namespace": NS, **extra}


def _plan_texts(spark) -> str:
    """What Spark's SQL tab shows of every query so far: description, details and plan of each execution."""
    store = spark._jsparkSession.sharedState().statusStore()
    executions = store.executionsList()
    out = []
    for i in range(executions.size()):
        e = executions.apply(i)
        out += [str(e.description()), str(e.details()), str(e.physicalPlanDescription())]
    return "\n".join(out)


def _run_java_admin(*args: str, dist: Path, home: Path) -> str:
    java_home, _ = peers.find_java()
    env = dict(os.environ, JAVA_HOME=str(java_home), RMQ_DATA_DIR=str(home))
    done = subprocess.run([str(dist / "bin" / "mqadmin"), *args], env=env, capture_output=True, timeout=180)
    return done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")


def _ask(namesrv: str, call):
    """``call(api)`` on a signed client of its own (connections closed after, on a loop of its own)."""
    async def run():
        api = MQClientAPI(namesrv, credentials=Credentials(AK, SK))
        try:
            return await call(api)
        finally:
            await api.close()
    return asyncio.run(run())


def _rows_of(spark, query, name: str) -> int:
    """Rows the query has read so far, from its progress (no Spark job per look: polling with jobs starves
    a loaded machine's Python workers); a failed query raises its error (no wait for nothing)."""
    if query.exception() is not None:
        raise AssertionError(f"the query failed: {query.exception()}")
    return sum(int(p.get("numInputRows", 0)) for p in query.recentProgress)


def _wait(cond, timeout: float, what: str, every: float = 0.5) -> None:
    """Until ``cond()`` holds, asked every ``every`` seconds (each look costs requests), at most ``timeout``."""
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


# ------------------------------------------------------------------------------------- group presence
def test_group_presence_heartbeats_and_unregisters(acl) -> None:
    """The planner's membership without Spark: a heartbeat makes the group and its %RETRY% route known,
    close() unregisters; a wrong secret is the broker's answer at once."""
    from rocketstream.spark.brokers import broker_locations
    from rocketstream.spark.group_presence import GroupPresence
    from rocketstream.spark.options import parse_options

    group = unique("SecPresG")
    opts = parse_options({**options(acl), "consumerGroup": group}, streaming=True)
    presence = GroupPresence(opts)
    try:
        presence.keep(broker_locations(opts))
        assert presence.addrs == (acl.broker,)
        ids = _ask(acl.namesrv, lambda api: api.consumer_ids(acl.broker, f"{NS}%{group}", 10))
        assert ids == [presence.client_id], ids
        assert _ask(acl.namesrv, lambda api: api.get_route(f"%RETRY%{NS}%{group}", 10)) is not None
        data = presence.heartbeat_data()["consumerDataSet"][0]
        assert data["groupName"] == f"{NS}%{group}" and data["consumeType"] == "CONSUME_ACTIVELY"
        assert [s["topic"] for s in data["subscriptionDataSet"]] == [f"{NS}%{acl.topic}"]
        presence.close()
        with pytest.raises(BrokerResponseError):   # code 1: "no consumer for this group"
            _ask(acl.namesrv, lambda api: api.consumer_ids(acl.broker, f"{NS}%{group}", 10))
        bad = parse_options({**options(acl), "consumerGroup": group, "secretKey": WRONG}, streaming=True)
        t0 = time.monotonic()
        with pytest.raises(BrokerResponseError) as info:
            GroupPresence(bad).keep(broker_locations(bad))
        assert time.monotonic() - t0 < 15 and SIGNATURE_FAILED in str(info.value) and acl.broker in str(info.value)
        no_secret(str(info.value), "a refused heartbeat")
    finally:
        presence.close()


# ---------------------------------------------------------------------------------------------- batch
def test_batch_read_signed_in_a_namespace(spark, acl, spark_log, capsys) -> None:
    df = spark.read.format("rocketmq").options(**options(acl)).load()
    rows = df.select("topic", "body", "queueId", "queueOffset").collect()
    assert sorted(r.body for r in rows) == sorted(f"secured-{i}".encode() for i in range(N))
    assert {r.topic for r in rows} == {acl.topic}   # the user's name, not nsSec%topic
    df.explain(True)
    no_secret(capsys.readouterr().out, "df.explain(True)")
    no_secret(str(df._jdf.queryExecution().toString()), "the batch query's plans")


# ------------------------------------------------------------------------------------------ streaming
def test_stream_is_a_consumer_of_its_group_and_commits(spark, acl, spark_log, tmp_path, capsys) -> None:
    group = unique("SecG")
    wire_group = f"{NS}%{group}"
    sdf = spark.readStream.format("rocketmq").options(**options(acl, consumerGroup=group,
                                                                 startingOffsets="earliest")).load()
    sdf.explain(True)
    no_secret(capsys.readouterr().out, "the stream's explain(True)")
    name = unique("secq")
    query = (sdf.select("topic", "body").writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="200 milliseconds").start())
    try:
        _wait(lambda: _rows_of(spark, query, name) >= N, 180, "the stream's rows")
        assert spark.sql(f"select count(*) c from {name}").collect()[0].c == N
        assert {r.topic for r in spark.sql(f"select distinct topic from {name}").collect()} == {acl.topic}
        # known to the broker as a consumer of nsSec%group (mqadmin consumerConnection) ...
        ids = _ask(acl.namesrv, lambda api: api.consumer_ids(acl.broker, wire_group, 10))
        assert len(ids) == 1 and "@rocketstream-spark-" in ids[0], ids
        # ... with its %RETRY% route, and its commits read through that route (consumerProgress -g, no -t)
        assert _ask(acl.namesrv, lambda api: api.get_route(f"%RETRY%{wire_group}", 10)) is not None

        def committed() -> bool:
            code = cli.main(["consumer-progress", "--namesrv", acl.namesrv, "--group", group, "--namespace", NS,
                             "--access-key", AK, "--secret-key", SK, "--json"])
            out, err = capsys.readouterr()
            no_secret(out + err, "consumer-progress")
            if code != 0:
                return False
            progress = json.loads(out)
            return progress["diffTotal"] == 0 and sum(q["brokerOffset"] for q in progress["queues"]) == N

        _wait(committed, 60, "the group's offsets at the end of the topic")
        progress_text = "\n".join(p.json for p in query.recentProgress) + query.lastProgress.json
        assert acl.topic in progress_text
        no_secret(progress_text, "recentProgress/lastProgress")
        no_secret(str(query._jsq.streamingQuery().lastExecution().toString()), "the running query's plans")
    finally:
        query.stop()
    # the query's planner process ends with the query: its connection closes and the broker drops it
    def gone() -> bool:
        try:
            return not _ask(acl.namesrv, lambda api: api.consumer_ids(acl.broker, wire_group, 10))
        except BrokerResponseError as exc:   # 4.9.8 and ours answer code 1 "no consumer for this group"
            return exc.code == 1
    _wait(gone, 60, "the group without the stopped query")


# ------------------------------------------------------------------------------------------------ sink
def test_sink_writes_signed_into_the_namespace(spark, acl, spark_log, capsys) -> None:
    topic = unique("SecSinkT")
    df = spark.createDataFrame([(f"sunk-{i}",) for i in range(10)], "body string")
    (df.write.format("rocketmq").options(nameServer=acl.namesrv, topic=topic, accessKey=AK, secretKey=SK,
                                         securityToken=TOKEN, namespace=NS).mode("append").save())
    back = spark.read.format("rocketmq").options(**{**options(acl), "topic": topic}).load().select("topic", "body")
    rows = back.collect()
    assert sorted(r.body for r in rows) == sorted(f"sunk-{i}".encode() for i in range(10))
    assert {r.topic for r in rows} == {topic}
    # on the wire the topic is nsSec%topic; the bare name was never created
    assert _ask(acl.namesrv, lambda api: api.get_route(f"{NS}%{topic}", 10)) is not None
    assert _ask(acl.namesrv, lambda api: api.get_route(topic, 10)) is None


def test_exactly_once_sink_signed_in_a_namespace(spark, acl, spark_log, tmp_path, capsys) -> None:
    """exactlyOnce on a secured cluster: the tasks' halves, the driver's commits and the check-back responder
    all sign as the account, in the namespace; the responder's command line and log show no secret."""
    from rocketstream.spark import exactly_once as eos

    topic, group = unique("SecEosT"), unique("SecEosPG")
    src, ck = tmp_path / "in", tmp_path / "ck"
    src.mkdir()
    for f in range(2):
        (src / f"part-{f}.json").write_text("".join(json.dumps({"id": f * 10 + i}) + "\n" for i in range(10)))
    frame = spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).json(str(src)) \
        .selectExpr("cast(concat('eos-', cast(id as string)) as binary) as body")
    query = (frame.writeStream.format("rocketmq")
             .options(**{**options(acl), "topic": topic, "producerGroup": group, "exactlyOnce": "true",
                         "checkpointLocation": str(ck)})
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None and not query.isActive
    read = spark.read.format("rocketmq").options(**{**options(acl), "topic": topic})

    def bodies() -> list[bytes]:
        return sorted(r.body for r in read.load().select("body").collect())
    assert bodies() == sorted(f"eos-{i}".encode() for i in range(20))
    assert {r.topic for r in read.load().select("topic").collect()} == {topic}

    # the responder: secrets neither on its command line nor in its log; its answers are signed: halves of a
    # batch recorded as unresolved are committed by the broker's check-back through it
    state = ck / eos.STATE_DIR
    (pidfile,) = state.glob("responder-*.pid")
    cmdline = Path(f"/proc/{int(pidfile.read_text())}/cmdline").read_bytes().decode(errors="replace")
    no_secret(cmdline, "the responder's command line")
    sender = eos.HalfSender(acl.namesrv, group, eos.transaction_group(str(ck)), 15_000, 4 << 20, 7,
                            SecuredOptions(Credentials(AK, SK, TOKEN), None, NS))
    try:
        from rocketstream.client import Message

        sender.send([Message(f"{NS}%{topic}", f"late-{i}".encode()) for i in range(3)], None)
    finally:
        sender.close()
    eos.CommitRecord(state).write(7, [sender.out.attempt], eos.UNRESOLVED, "0:0")
    want = sorted([f"eos-{i}".encode() for i in range(20)] + [f"late-{i}".encode() for i in range(3)])
    _wait(lambda: bodies() == want, 120, "the check-back to commit the unresolved batch's halves")
    log_text = (state / "responder.log").read_text(errors="replace")
    no_secret(log_text, "the responder's log")
    assert "signature" not in log_text.lower() and "COMMIT_MESSAGE" in log_text, log_text[-3000:]


# ---------------------------------------------------------------------------------------- refusals
def _fails_fast(action, limit_s: float = 60.0) -> str:
    t0 = time.monotonic()
    with pytest.raises(Exception) as info:
        action()
    seconds = time.monotonic() - t0
    text = str(info.value)
    assert seconds < limit_s, (seconds, text[-2000:])
    no_secret(text, "the error")
    return text


_REFUSED: list[str] = []   # brokers whose refusals the module's Spark queries met (see the log check)


def test_wrong_secret_and_missing_permission_fail_at_once(spark, acl, spark_log, tmp_path, capsys) -> None:
    bad = {**options(acl), "secretKey": WRONG}
    text = _fails_fast(lambda: spark.read.format("rocketmq").options(**bad).load().count())
    assert SIGNATURE_FAILED in text and acl.broker in text and "GET_TOPIC_STATS_INFO" in text, text[-2000:]
    # a stream: refused at its first heartbeat, before any commit
    query = (spark.readStream.format("rocketmq").options(**bad, consumerGroup=unique("SecBadG")).load()
             .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        text = _fails_fast(lambda: query.awaitTermination(120))
    finally:
        query.stop()
    assert SIGNATURE_FAILED in text and acl.broker in text, text[-2000:]
    # the sink: a wrong secret, and an account without PUB on the topic
    df = spark.createDataFrame([("x",)], "body string")

    def write(ak: str, sk: str) -> None:
        (df.write.format("rocketmq").options(nameServer=acl.namesrv, topic=unique("SecBadSinkT"), accessKey=ak,
                                             secretKey=sk).mode("append").save())

    text = _fails_fast(lambda: write(AK, WRONG))
    assert SIGNATURE_FAILED in text and acl.broker in text, text[-2000:]
    _REFUSED.append(acl.broker)
    if acl.kind == "ours":
        text = _fails_fast(lambda: write(READER_AK, READER_SK))
        assert "No default permission for topic" in text and acl.broker in text, text[-2000:]
    else:   # 4.9.8's PlainAccessValidator checks no topic of SEND_BATCH_MESSAGE (320): any signed account writes
        write(READER_AK, READER_SK)
    # the CLI against the same broker
    code = cli.main(["produce", "--namesrv", acl.namesrv, "--topic", acl.topic, "--count", "1", "--access-key", AK,
                     "--secret-key", WRONG])
    out, err = capsys.readouterr()
    assert code == 2 and SIGNATURE_FAILED in err and acl.broker in err, err
    no_secret(out + err, "the CLI's output")


def test_no_secret_in_spark_plans_or_logs(spark, acl, spark_log) -> None:
    """After the module's queries (and their failures): what the SQL tab shows, and Spark's log."""
    texts = _plan_texts(spark)
    assert "rocketmq" in texts
    no_secret(texts, "the SQL tab's plan descriptions")
    log = spark_log.read_text(errors="replace") if spark_log.exists() else ""
    if _REFUSED:   # the refusals above were logged by Spark (task failures): the file is the real log
        assert SIGNATURE_FAILED in log, log[-2000:]
    no_secret(log, "Spark's log")


def test_options_and_errors_hide_secrets() -> None:
    from rocketstream.errors import OptionError
    from rocketstream.spark.options import parse_options
    from rocketstream.spark.sink import parse_sink_options

    given = {"nameServer": "127.0.0.1:9876", "topic": "T", "accesskey": AK, "SECRETKEY": SK, "securityToken": TOKEN,
             "tls.client.keyPassword": WRONG, "tls.test.mode.enable": "true", "NameSpace": NS}
    parsed = parse_options(given, streaming=True)
    assert parsed.secured.credentials == Credentials(AK, SK, TOKEN) and parsed.secured.namespace == NS
    assert parsed.secured.tls is not None and parsed.secured.tls.test_mode
    no_secret(repr(parsed) + str(parsed), "RocketMQOptions")
    sink = parse_sink_options({**given, "checkpointLocation": "/x"}, streaming=True)
    no_secret(repr(sink), "SinkOptions")
    for bad, option in (({"secretKey": SK}, "accessKey"), ({"accessKey": AK}, "secretKey"),
                        ({"accessKey": AK, "secretKey": SK, "securityToken": ""}, "securityToken"),
                        ({"namespace": "a%b"}, "namespace"), ({"tls.enable": "maybe"}, "tls.enable"),
                        ({"tls.client.trustcertpath": "/nonexistent.pem"}, "tls.client.trustCertPath")):
        with pytest.raises(OptionError) as info:
            parse_options({"nameServer": "127.0.0.1:9876", "topic": "T", **bad}, streaming=False)
        assert info.value.option == option, (bad, info.value)
        no_secret(str(info.value), "an option error")
    with pytest.raises(OptionError) as info:   # a store directory has no account
        parse_options({"path": "/tmp/store", "topic": "T", "accessKey": AK, "secretKey": SK}, streaming=False)
    assert "network mode" in str(info.value)
    no_secret(str(info.value), "an option error")


# ------------------------------------------------------------------------------------------ 5.3.3
DISTS_533 = (peers.REPO.parent / "shared" / "rocketmq-5.3.3", Path("/work/shared/rocketmq-5.3.3"))


@pytest.fixture(scope="module")
def rmq533(tmp_path_factory: pytest.TempPathFactory):
    """A real 5.3.3 name server + broker (no auth), started by the dist's scripts (same RMQ_* settings)."""
    dist = next((d for d in DISTS_533 if (d / "bin" / "broker").is_file()), None)
    if dist is None:
        pytest.skip(f"no RocketMQ 5.3.3 distribution in {[str(d) for d in DISTS_533]}")
    try:
        peers.find_java()
    except peers.JavaUnavailable as exc:
        pytest.skip(str(exc))
    home = tmp_path_factory.mktemp("rmq533")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(peers, "find_dist", lambda: dist)
        ns = peers.start_namesrv(home)
        br = None
        try:
            ns.wait_ready()
            br = peers.start_broker(home, ns.port)
            br.wait_ready()
        except BaseException:
            if br is not None:
                br.kill()
            ns.kill()
            raise
    try:
        yield SimpleNamespace(dist=dist, home=home, namesrv=f"127.0.0.1:{ns.port}", broker=f"127.0.0.1:{br.port}")
    finally:
        br.kill()
        ns.kill()


@pytest.mark.slow
def test_group_presence_lets_533_take_commits(rmq533) -> None:
    """Without a heartbeat 5.3.3 refuses a new group's commit (code 26, 'Group <g> not exist!'); after the
    query's heartbeat it takes it, and mqadmin consumerProgress -g (no -t, through %RETRY%) shows diff 0."""
    from rocketstream.spark.brokers import broker_locations
    from rocketstream.spark.group_presence import GroupPresence
    from rocketstream.spark.options import parse_options

    topic, group = unique("P533T"), unique("P533G")
    with Producer(unique("P533PG"), namesrv=rmq533.namesrv) as producer:
        sent = [producer.send(topic, f"v5-{i}".encode()) for i in range(N)]
    ends: dict[int, int] = {}
    for r in sent:
        ends[r.queue.queue_id] = max(ends.get(r.queue.queue_id, 0), r.queue_offset + 1)
    opts = parse_options({"nameServer": rmq533.namesrv, "topic": topic, "consumerGroup": group}, streaming=True)
    locations = broker_locations(opts)
    view = locations[0].open()
    with pytest.raises(BrokerResponseError) as info:
        view.commit_offsets(group, [{topic: ends}])
    assert info.value.code == 26 and "not exist" in (info.value.remark or ""), info.value
    presence = GroupPresence(opts)
    try:
        presence.keep(locations)
        view.commit_offsets(group, [{topic: ends}])
        assert view.query_offsets(group, topic, sorted(ends)) == ends
        out = _run_java_admin("consumerProgress", "-n", rmq533.namesrv, "-g", group, dist=rmq533.dist,
                              home=rmq533.home)
        assert topic in out and "Diff Total: 0" in out, out[-3000:]
    finally:
        presence.close()


@pytest.mark.slow
def test_stream_group_on_rocketmq_533(spark, rmq533, tmp_path: Path) -> None:
    """5.3.3 takes UPDATE_CONSUMER_OFFSET only for a group it knows: the query's heartbeat makes it known
    (without it: 'response code 26, Group <g> not exist!'); mqadmin consumerProgress -g (no -t) shows diff 0."""
    namesrv = rmq533.namesrv
    topic, group = unique("S533T"), unique("S533G")
    with Producer(unique("S533PG"), namesrv=namesrv) as producer:
        for i in range(N):
            producer.send(topic, f"v5-{i}".encode())
    name = unique("q533")
    query = (spark.readStream.format("rocketmq").option("nameServer", namesrv).option("topic", topic)
             .option("consumerGroup", group).option("startingOffsets", "earliest").load()
             .writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        _wait(lambda: _rows_of(spark, query, name) >= N, 180, "rows")

        def diff_zero() -> bool:
            assert query.exception() is None, query.exception()
            out = _run_java_admin("consumerProgress", "-n", namesrv, "-g", group, dist=rmq533.dist, home=rmq533.home)
            return topic in out and "Diff Total: 0" in out

        _wait(diff_zero, 180, "consumerProgress diff 0", every=2.0)
    finally:
        query.stop()


@pytest.mark.slow
def test_local_mode_commit_through_a_live_533_broker(rmq533) -> None:
    """Local mode over the store a live 5.3.3 broker serves commits its group through ``brokerAddr``; 5.3.3 takes
    UPDATE_CONSUMER_OFFSET only for a group it knows (code 26 before), so the first refused commit is followed by
    one heartbeat that makes the group known, and the commit again."""
    from rocketstream.spark import positions
    from rocketstream.spark.brokers import broker_locations
    from rocketstream.spark.commits import commit_offsets
    from rocketstream.spark.offset_ranges import QueueKey
    from rocketstream.spark.options import parse_options

    topic, group = unique("L533T"), unique("L533G")
    with Producer(unique("L533PG"), namesrv=rmq533.namesrv) as producer:
        sent = [producer.send(topic, f"v5-{i}".encode()) for i in range(N)]
    name = sent[0].queue.broker_name
    (store,) = {p.parent.parent for p in rmq533.home.rglob("commitlog/*")}
    ends: dict[int, int] = {}
    for r in sent:
        ends[r.queue.queue_id] = max(ends.get(r.queue.queue_id, 0), r.queue_offset + 1)
    options = parse_options({"path": str(store), "brokerName": name, "topic": topic, "consumerGroup": group,
                             "brokerAddr": rmq533.broker}, streaming=True)
    with positions.open_views(broker_locations(options)) as views:
        commit_offsets(options, views, {QueueKey(topic, name, q): o for q, o in ends.items()})
    got = _ask_plain(rmq533.namesrv, lambda api: asyncio.gather(*(api.query_offset(rmq533.broker, group, topic, q, 10)
                                                                  for q in sorted(ends))))
    assert dict(zip(sorted(ends), got, strict=True)) == ends


def _ask_plain(namesrv: str, call):
    async def run():
        api = MQClientAPI(namesrv)
        try:
            return await call(api)
        finally:
            await api.close()
    return asyncio.run(run())
