"""Streams that follow their topics (issue 22): queues added to a topic (updateTopic 4 -> 8) and brokers added
to or removed from its routes are seen by a running network-mode stream within ``routeRefreshIntervalMs``
(new queues from earliest, as Kafka's source starts new partitions); a queue that leaves the routes of a
broker still there follows failOnDataLoss; and the network tunables (requestTimeoutMs, pullTimeoutMs,
pullBatchSize, pullRetries) are options with RocketMQ's defaults that reach the requests.

The stream reader's methods are called as Spark's planner calls them (offsets through JSON, as the checkpoint
hands them back), against our name server with our brokers (started once for the module) and, for the queue
growth by ``mqadmin updateTopic``, the session's real 4.9.8 name server and broker. The refresh interval is
set to 1 ms, so every trigger reads the routes again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from rocketstream.client.common import PullResult, PullStatus
from rocketstream.errors import DataLossError, OptionError, RemotingTimeoutError
from rocketstream.spark.network.puller import PULL_MAX_NUMS, PullTarget, _RangePuller
from rocketstream.spark.network.view import NetworkBroker
from rocketstream.spark.options import parse_options
from rocketstream.spark.schema import projection_for
from rocketstream.spark.stream import RocketMQStreamReader
from test_network_multi import BROKER_CONF, create_topic, start_broker, start_brokers, wait_route
from tests.client.scenario_util import produce, unique
from tests.namesrv.conftest import start_ours as start_namesrv
from tests.namesrv.conftest import stop_ours as stop_namesrv
from tests.realbroker import peers

FOLLOW = {"routeRefreshIntervalMs": "1", "startingOffsets": "earliest"}


# ---- options ------------------------------------------------------------------------------------------

def parse(streaming: bool = True, **given: str):
    return parse_options(given, streaming=streaming)


def test_refresh_and_tunable_options_default_to_rocketmq_and_name_themselves():
    net = {"nameServer": "127.0.0.1:9876", "topic": "T"}
    o = parse(**net)
    assert (o.route_refresh_interval_ms, o.request_timeout_ms, o.pull_timeout_ms) == (30_000, 3_000, 30_000)
    assert (o.pull_batch_size, o.pull_retries) == (PULL_MAX_NUMS, 0)
    o = parse(**net, pollNameServerInterval="500", mqClientApiTimeout="2s", pullTimeoutMs="1m", pullBatchSize="32",
              pullRetries="2")
    assert (o.route_refresh_interval_ms, o.request_timeout_ms, o.pull_timeout_ms) == (500, 2_000, 60_000)
    assert (o.pull_batch_size, o.pull_retries) == (32, 2)
    assert parse(path="/s", topic="T", routeRefreshIntervalMs="5s").route_refresh_interval_ms == 5_000
    bad = [("routeRefreshIntervalMs", "soon"), ("routeRefreshIntervalMs", "0"), ("requestTimeoutMs", "-1"),
           ("pullTimeoutMs", "fast"), ("pullBatchSize", "0"), ("pullBatchSize", "x"), ("pullRetries", "-1"),
           ("pullRetries", "101"), ("pullBatchSize", str(1 << 31))]
    for key, value in bad:
        with pytest.raises(OptionError) as err:
            parse(**net, **{key: value})
        assert err.value.option == key, (key, value, err.value)
    with pytest.raises(OptionError) as err:   # the alias the user wrote is the one named
        parse(**net, mqClientApiTimeout="never")
    assert err.value.option == "mqClientApiTimeout"
    with pytest.raises(OptionError, match="given twice"):
        parse(**net, requestTimeoutMs="1000", mqClientApiTimeout="1000")
    for key in ("requestTimeoutMs", "pullTimeoutMs", "pullBatchSize", "pullRetries"):
        with pytest.raises(OptionError, match="network mode") as err:
            parse(path="/s", topic="T", **{key: "5"})
        assert err.value.option == key


def test_locations_carry_the_tunables_to_the_views():
    from rocketstream.spark.network.view import NetworkBrokerView

    loc = NetworkBroker("b", "127.0.0.1:1", "127.0.0.1:2", "g", (("T", (0,)),), 1.5, 7.0, 5, 2)
    view = NetworkBrokerView(loc)
    assert view.timeout_s == 1.5
    assert loc == NetworkBroker("b", "127.0.0.1:1", "127.0.0.1:2", "g", (("T", (0,)),), 1.5, 7.0, 5, 2)
    assert loc != NetworkBroker("b", "127.0.0.1:1", "127.0.0.1:2", "g", (("T", (0,)),))


class _FakeApi:
    """A PullApi answering NO_MATCHED_MSG that moves ``max_nums`` on; the first ``fail`` pulls time out."""

    def __init__(self, fail: int) -> None:
        self.fail = fail
        self.asked: list[tuple[int, int, float]] = []

    async def pull(self, addr, *, group, topic, queue_id, offset, max_nums, sys_flag, subscription, timeout,
                   body_buffer=False):
        self.asked.append((offset, max_nums, timeout))
        if self.fail:
            self.fail -= 1
            raise RemotingTimeoutError("no answer", addr=addr, code=11, timeout_s=timeout)
        return PullResult(PullStatus.NO_MATCHED_MSG, offset + max_nums, 0, 1 << 20)


def test_pull_batch_size_timeout_and_retries_reach_the_pulls(caplog):
    api = _FakeApi(fail=2)
    target = PullTarget(api, "127.0.0.1:1", "b", "g", timeout_s=4.5, batch_size=5, retries=2)
    puller = _RangePuller(target, "T", 0, 10, 22, None, True)
    with caplog.at_level(logging.WARNING, logger="rocketstream.spark.network.puller"):
        asyncio.run(puller.next_chunk())
    assert api.asked == [(10, 5, 4.5)] * 3 + [(15, 5, 4.5), (20, 2, 4.5)]
    assert "1 of pullRetries=2" in caplog.text and "2 of pullRetries=2" in caplog.text
    api = _FakeApi(fail=2)
    puller = _RangePuller(PullTarget(api, "127.0.0.1:1", "b", "g", retries=1), "T", 0, 0, 3, None, True)
    with pytest.raises(RemotingTimeoutError):   # retries spent: the task fails (Spark retries it)
        asyncio.run(puller.next_chunk())
    assert [a[1] for a in api.asked] == [3, 3]


# ---- our name server with two of our brokers ------------------------------------------------------------

@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    home = tmp_path_factory.mktemp("follow")
    ns = start_namesrv(home)
    servers = {}
    try:
        servers = start_brokers(home, ns.addr, {"broker-a": BROKER_CONF, "broker-b": BROKER_CONF})
        yield home, ns.addr, {name: f"127.0.0.1:{sv.port}" for name, sv in servers.items()}
    finally:
        codes = [s.stop(30) for s in servers.values()]
        stop_namesrv(ns)
    assert codes == [0] * len(codes), f"brokers exited with {codes}"


_READERS: list[RocketMQStreamReader] = []


@pytest.fixture(autouse=True)
def _stop_readers():
    """Every stream reader a test made is stopped after it (as Spark stops a query's: its views' clients,
    connections and threads closed), whether the test passed or not."""
    yield
    readers, _READERS[:] = list(_READERS), []
    for r in readers:
        r.stop()


def reader(namesrv: str, topic: str, **extra: str) -> RocketMQStreamReader:
    options = {"nameServer": namesrv, "topic": topic, "consumerGroup": unique("FollowG"), **FOLLOW, **extra}
    r = RocketMQStreamReader(parse_options(options, streaming=True), projection_for(None))
    _READERS.append(r)
    return r


def spark_json(offset):
    return json.loads(json.dumps(offset))


def trigger(r: RocketMQStreamReader, start):
    """One trigger as Spark runs it: latestOffset (after the refresh interval), then the planned ranges."""
    wait_until(lambda: (time.monotonic() - r._brokers_at) * 1000 >= r.options.route_refresh_interval_ms, 5,
               "the refresh interval")
    end = spark_json(r.latestOffset(start, ReadAllAvailable()))
    ranges = sorted((b, t, q, s, e) for task in r.partitions(start, end) for b, t, q, s, e in task.ranges)
    return end, ranges


def ends_of(results) -> dict[tuple[str, int], int]:
    """The next offset of every (broker, queue) the sends reached."""
    ends: dict[tuple[str, int], int] = {}
    for r in results:
        key = (r.queue.broker_name, r.queue.queue_id)
        ends[key] = max(ends.get(key, 0), r.queue_offset + 1)
    return ends


def expected(topic: str, before: dict[tuple[str, int], int], after: dict[tuple[str, int], int]):
    """The ranges a trigger plans from ``before`` to ``after`` (queues without news left out)."""
    return sorted((b, topic, q, before.get((b, q), 0), e) for (b, q), e in after.items()
                  if e > before.get((b, q), 0))


def wait_until(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.001)


def test_queues_added_by_update_topic_are_read_from_earliest(pair):
    _, ns, brokers = pair
    topic = unique("Grow")
    create_topic(brokers["broker-a"], topic, 4)
    wait_route(ns, topic, {"broker-a": 6})
    first = ends_of(produce(ns, topic, [b"a%d" % i for i in range(8)]))
    r = reader(ns, topic)
    start = spark_json(r.initialOffset())
    assert start == {topic: {"broker-a": {str(q): 0 for q in range(4)}}}
    end, ranges = trigger(r, start)
    assert ranges == expected(topic, {}, first)
    create_topic(brokers["broker-a"], topic, 8)   # updateTopic 4 -> 8
    wait_until(lambda: wait_route_queues(ns, topic) == 8, 30, "8 queues in the route")
    second = ends_of(produce(ns, topic, [b"b%d" % i for i in range(32)]))
    assert any(q >= 4 for _, q in second), second
    end2, ranges = trigger(r, end)
    assert set(end2[topic]["broker-a"]) == {str(q) for q in range(8)}
    assert ranges == expected(topic, first, {**first, **second})   # the new queues from earliest (0)


def wait_route_queues(ns: str, topic: str) -> int:
    from test_network_multi import route

    r = route(ns, topic)
    return sum(qd.read_queue_nums for qd in r.queue_datas) if r is not None else 0


def test_a_broker_joining_and_leaving_the_routes(pair):
    home, ns, brokers = pair
    topic = unique("Join")
    create_topic(brokers["broker-a"], topic, 2)
    wait_route(ns, topic, {"broker-a": 6})
    first = ends_of(produce(ns, topic, [b"a%d" % i for i in range(4)]))
    r = reader(ns, topic)
    start = spark_json(r.initialOffset())
    end, ranges = trigger(r, start)
    assert ranges == expected(topic, {}, first)
    server, addr = start_broker(home, "broker-c", ns, BROKER_CONF)
    try:
        create_topic(addr, topic, 2)
        wait_route(ns, topic, {"broker-a": 6, "broker-c": 6})
        second = ends_of(produce(ns, topic, [b"c%d" % i for i in range(16)]))
        assert any(b == "broker-c" for b, _ in second), second
        end2, ranges = trigger(r, end)
        assert sorted(end2[topic]) == ["broker-a", "broker-c"]
        assert ranges == expected(topic, first, {**first, **second})   # broker-c's queues from offset 0
    finally:
        assert server.stop(30) == 0
    wait_route(ns, topic, {"broker-a": 6})
    end3, ranges = trigger(r, end2)
    assert ranges == []   # nothing new, and no error for the broker that left
    assert end3[topic]["broker-c"] == end2[topic]["broker-c"]   # its offsets kept until it is back


def test_a_queue_leaving_the_routes_follows_fail_on_data_loss(pair, caplog):
    _, ns, brokers = pair
    topic = unique("Shrink")
    create_topic(brokers["broker-b"], topic, 4)
    wait_route(ns, topic, {"broker-b": 6})
    produce(ns, topic, [b"x%d" % i for i in range(8)])
    strict, lenient = reader(ns, topic), reader(ns, topic, failOnDataLoss="false")
    starts = [spark_json(x.initialOffset()) for x in (strict, lenient)]
    ends = [trigger(x, s)[0] for x, s in zip((strict, lenient), starts, strict=True)]
    create_topic(brokers["broker-b"], topic, 2)   # readQueueNums 4 -> 2: queues 2 and 3 leave the routes
    wait_until(lambda: wait_route_queues(ns, topic) == 2, 30, "2 queues in the route")
    with pytest.raises(DataLossError, match=rf"topic '{topic}' on broker 'broker-b' queue 2") as err:
        trigger(strict, ends[0])
    assert (err.value.topic, err.value.broker_name, err.value.queue_id) == (topic, "broker-b", 2)
    assert "failOnDataLoss=false" in str(err.value)
    with caplog.at_level(logging.WARNING, logger="rocketstream.spark.stream"):
        end, ranges = trigger(lenient, ends[1])
    assert set(end[topic]["broker-b"]) == {"0", "1"} and ranges == []
    assert f"topic '{topic}' on broker 'broker-b' queue 3" in caplog.text and "dropped" in caplog.text


def test_the_refresh_interval_holds_the_routes_between_refreshes(pair):
    _, ns, brokers = pair
    topic = unique("Hold")
    create_topic(brokers["broker-a"], topic, 1)
    wait_route(ns, topic, {"broker-a": 6})
    r = reader(ns, topic, routeRefreshIntervalMs="1h")
    start = spark_json(r.initialOffset())
    create_topic(brokers["broker-a"], topic, 3)
    wait_until(lambda: wait_route_queues(ns, topic) == 3, 30, "3 queues in the route")
    end = spark_json(r.latestOffset(start, ReadAllAvailable()))
    assert set(end[topic]["broker-a"]) == {"0"}   # not yet: the next refresh is an hour away
    r._brokers_at -= 3600
    end = spark_json(r.latestOffset(end, ReadAllAvailable()))
    assert set(end[topic]["broker-a"]) == {"0", "1", "2"}


# ---- the real 4.9.8: updateTopic by its own mqadmin, mid-stream ------------------------------------------

def mqadmin(target, *args: str, timeout: float = 120) -> str:
    """mqadmin SUBCOMMAND ... -n NAMESRV of the 4.9.8 dist (tests/realbroker/peers.py; exit 0 required); its
    stdout."""
    res = peers.mqadmin(target.home / "mqadmin", *args, "-n", target.namesrv_addr, timeout=timeout)
    assert res.returncode == 0, f"mqadmin {' '.join(args)}: exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res.stdout


def test_queue_growth_by_mqadmin_on_the_real_broker(java_broker):
    ns, addr = java_broker.namesrv_addr, java_broker.broker_addr
    topic = unique("Grow498")
    create_topic(addr, topic, 4)   # as mqadmin updateTopic -b sends it (one JVM start fewer)
    wait_until(lambda: wait_route_queues(ns, topic) == 4, 60, "the topic's route")
    first = ends_of(produce(ns, topic, [b"a%d" % i for i in range(8)]))
    r = reader(ns, topic)
    start = spark_json(r.initialOffset())
    end, ranges = trigger(r, start)
    broker = java_broker.broker_name
    assert ranges == expected(topic, {}, first)
    mqadmin(java_broker, "updateTopic", "-b", addr, "-t", topic, "-r", "8", "-w", "8")
    wait_until(lambda: wait_route_queues(ns, topic) == 8, 60, "8 queues in the route")
    second = ends_of(produce(ns, topic, [b"b%d" % i for i in range(32)]))
    assert any(q >= 4 for _, q in second), second
    end2, ranges = trigger(r, end)
    assert set(end2[topic][broker]) == {str(q) for q in range(8)}
    assert ranges == expected(topic, first, {**first, **second})   # the new queues from earliest (0)


def test_client_api_timeout_is_per_instance():
    """A request without a timeout of its own waits the MQClientAPI instance's (ClientConfig.mqClientApiTimeout,
    3 s by default), not a module constant: against a peer that never answers, each instance gives up after
    its own."""
    from rocketstream.client.api import MQClientAPI

    async def go() -> list[float]:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)   # accepts, never answers
        addr = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        waited = []
        try:
            for timeout in (0.3, 0.9):
                api = MQClientAPI(addr, timeout=timeout)
                with pytest.raises(RemotingTimeoutError) as err:
                    await api.max_offset(addr, "T", 0)
                assert timeout - 0.25 < err.value.timeout_s <= timeout   # less the connect time
                with pytest.raises(RemotingTimeoutError):
                    await api.get_route("T")   # the name server side too
                await api.close()
                waited.append(err.value.timeout_s)
        finally:
            server.close()
        return waited

    assert MQClientAPI("127.0.0.1:1").timeout == 3.0
    assert len(asyncio.run(go())) == 2


def test_local_stream_reads_queues_added_to_the_store(tmp_path):
    """Local mode needs no refresh: the store's queues are read again every trigger (its topic config and
    consume-queue directories), so queues added by a writer are planned from their first offset at once."""
    from spark_stores import TOPIC, fill

    root = tmp_path / "broker-a"
    fill(root, 8, queues=4)
    r = RocketMQStreamReader(parse_options({"path": str(root), "topic": TOPIC, **FOLLOW}, streaming=True),
                             projection_for(None))
    _READERS.append(r)
    start = spark_json(r.initialOffset())
    end, ranges = trigger(r, start)
    assert ranges == [("broker-a", TOPIC, q, 0, 2) for q in range(4)]
    fill(root, 16, queues=8, start=8)   # messages 8..23 over queues 0..7: 2 more each, queues 4..7 new
    end2, ranges = trigger(r, end)
    assert set(end2[TOPIC]["broker-a"]) == {str(q) for q in range(8)}
    assert ranges == [("broker-a", TOPIC, q, 2, 4) for q in range(4)] + \
                     [("broker-a", TOPIC, q, 0, 2) for q in range(4, 8)]
