"""Per-trigger planning kept cheap (issue 12): offsets as arrays over a queue index, offsets Spark hands back
recognised without parsing, the broker-side bounds of a whole topic in one GET_TOPIC_STATS_INFO, commits of
unchanged offsets skipped on the same connection, and the consumerOffset.json parse cache. Each fast path
is checked against the slow one it replaces. No Spark session: the reader's methods are called as Spark's
planner calls them (offsets through json.dumps/json.loads, as the checkpoint does)."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from rocketstream.client import topic_stats
from rocketstream.client.api import MQClientAPI
from rocketstream.client.topic_stats import parse_topic_stats
from rocketstream.codec.fastjson import dump_fastjson
from rocketstream.errors import BodyError, OptionError
from rocketstream.remoting import ResponseCode
from rocketstream.spark import commits
from rocketstream.spark.broker_view import bounds_arrays, queue_bounds
from rocketstream.spark.commits import OffsetCommits
from rocketstream.spark.local_view import LocalBroker
from rocketstream.spark.network.view import NetworkBroker
from rocketstream.spark.offset_ranges import QueueKey
from rocketstream.spark.offsets import QueueIndex, QueueOffsets
from rocketstream.spark.options import parse_options
from rocketstream.spark.schema import projection_for
from rocketstream.spark.stream import RocketMQStreamReader
from rocketstream.store.meta.offsets import ConsumerOffsetManager
from spark_stores import TOPIC, fill

# Java string order differs from Python's here: U+FF01 (one UTF-16 unit, 0xFF01) sorts after U+1F600
# (surrogates 0xD83D...), while Python compares code points (0xFF01 < 0x1F600).
TOPICS = ("T\uff01", "T\U0001f600", "Ta")
BROKERS = ("b", "a")


def _mapping(seed: int = 0) -> dict[QueueKey, int]:
    rng = np.random.default_rng(seed)
    return {QueueKey(t, b, q): int(rng.integers(0, 1 << 40)) for t in TOPICS for b in BROKERS for q in (10, 2, 0)}


def test_array_form_equals_the_mapping_form():
    mapping = _mapping()
    index = QueueIndex([(t, b, [10, 2, 0]) for t in TOPICS for b in BROKERS])
    values = index.array(mapping)
    assert (values >= 0).all()
    fast, slow = QueueOffsets.of_array(index, values), QueueOffsets(mapping)
    assert list(index.keys) == sorted(mapping) == list(slow)
    assert json.dumps(fast.to_dict()) == json.dumps(slow.to_dict())   # the checkpoint text, key order included
    assert fast == slow and slow == fast and dict(fast.items()) == dict(slow.items())
    assert fast.by_broker() == slow.by_broker() and len(fast) == len(slow)
    assert fast.matches(json.loads(slow.to_json())) and not fast.matches({})
    changed = values.copy()
    changed[3] += 1
    assert QueueOffsets.of_array(index, changed) != fast
    assert fast.array_in(QueueIndex(index.layout)) is not None   # an equal index (another object)
    assert slow.array_in(index).tolist() == values.tolist()
    smaller = QueueIndex([(TOPICS[0], "a", [0])])
    assert slow.array_in(smaller) is None and fast.array_in(smaller) is None
    returned = fast.to_dict()
    returned[TOPICS[0]]["a"]["0"] = -5   # what Spark does with the dict does not change the value
    assert fast.to_dict() == slow.to_dict()
    with pytest.raises(ValueError):
        QueueOffsets.of_array(index, values[:-1])


def test_bounds_arrays_equal_queue_bounds_and_keep_the_index(tmp_path):
    root = tmp_path / "broker-a"
    fill(root, 30, queues=5)
    fill(root, 7, topic="Other", queues=3)
    broker = LocalBroker("broker-a", str(root))
    view = broker.open()
    try:
        views = {"broker-a": view}
        index, low, high = bounds_arrays(views, [TOPIC, "Other", "Missing"])
        one_by_one = {QueueKey(t, "broker-a", q): (view.min_offset(t, q), view.max_offset(t, q))
                      for t in (TOPIC, "Other") for q in view.queue_ids(t)}
        assert list(index.keys) == sorted(one_by_one)
        assert list(zip(low.tolist(), high.tolist(), strict=True)) == [one_by_one[q] for q in index.keys]
        assert {q: tuple(b) for q, b in queue_bounds(views, [TOPIC, "Other"]).items()} == one_by_one
        again, _, _ = bounds_arrays(views, [TOPIC, "Other"], previous=index)
        assert again is index
        fill(root, 1, topic="Third", queues=1)
        grown, _, high2 = bounds_arrays(views, [TOPIC, "Other", "Third"], previous=index)
        assert grown is not index and len(grown) == len(index) + 1
        assert high2[grown.positions()[QueueKey("Third", "broker-a", 0)]] == 1
    finally:
        view.close()


def _reader(root, **extra):
    options = {"path": str(root), "topic": TOPIC, "startingOffsets": "earliest", **extra}
    return RocketMQStreamReader(parse_options(options, streaming=True), projection_for(None))


def _spark(offset):
    return json.loads(json.dumps(offset))   # what the checkpoint hands back


def test_triggers_plan_what_the_mapping_path_plans(tmp_path, monkeypatch):
    root = tmp_path / "broker-a"
    fill(root, 40, queues=4)
    reader = _reader(root, consumerGroup="PlanG")
    start = _spark(reader.initialOffset())
    parses = []
    real_parse = RocketMQStreamReader._parse.__globals__["_parse"]
    monkeypatch.setitem(RocketMQStreamReader._parse.__globals__, "_parse",
                        lambda o: parses.append(1) or real_parse(o))
    end = _spark(reader.latestOffset(start, ReadAllAvailable()))
    assert end == {TOPIC: {"broker-a": {str(q): 10 for q in range(4)}}}
    tasks = reader.partitions(start, end)
    ranges = sorted(r for t in tasks for r in t.ranges)
    assert ranges == [("broker-a", TOPIC, q, 0, 10) for q in range(4)]
    assert reader.reportLatestOffset() == end
    assert parses == []   # every offset was one the reader had returned
    fill(root, 6, queues=4, start=40)   # queues 0, 1 get 2 more, queues 2, 3 one more
    end2 = _spark(reader.latestOffset(end, ReadMaxRows(4)))
    assert sum(end2[TOPIC]["broker-a"].values()) - 40 == 4
    tasks = reader.partitions(end, end2)
    assert sum(e - s for t in tasks for *_, s, e in t.ranges) == 4
    assert ConsumerOffsetManager(root).offsets_of("PlanG", TOPIC) == {q: 10 for q in range(4)}
    # an offset the reader never returned is parsed (and checked) like any checkpoint line
    edited = json.loads(json.dumps(end))
    edited[TOPIC]["broker-a"]["0"] = 11
    assert [r for t in reader.partitions(end, edited) for r in t.ranges] == [("broker-a", TOPIC, 0, 10, 11)]
    assert parses
    edited[TOPIC]["broker-a"]["1"] = "x"
    with pytest.raises(OptionError, match="offset"):
        reader.latestOffset(edited, ReadAllAvailable())
    end3 = _spark(reader.latestOffset(end2, ReadAllAvailable()))
    assert end3 == {TOPIC: {"broker-a": {"0": 12, "1": 12, "2": 11, "3": 11}}}
    assert ConsumerOffsetManager(root).offsets_of("PlanG", TOPIC) == {int(q): o for q, o in
                                                                        end2[TOPIC]["broker-a"].items()}
    reader.stop()


def test_a_start_below_the_min_still_follows_fail_on_data_loss(tmp_path):
    root = tmp_path / "broker-a"
    fill(root, 8, queues=2)
    reader = _reader(root, failOnDataLoss="false")
    start = _spark(reader.initialOffset())
    # a checkpoint from a bigger store: beyond the max is an error whatever failOnDataLoss says
    beyond = {TOPIC: {"broker-a": {"0": 99, "1": 0}}}
    with pytest.raises(Exception, match="beyond the queue's max offset 4"):
        reader.latestOffset(beyond, ReadAllAvailable())
    assert _spark(reader.latestOffset(start, ReadAllAvailable())) == {TOPIC: {"broker-a": {"0": 4, "1": 4}}}


# ---- GET_TOPIC_STATS_INFO -----------------------------------------------------------------------------

def _stats_body(entries, topic="T", broker="broker-a"):
    return b'{"offsetTable":{' + b",".join(
        b'{"brokerName":"%s","queueId":%d,"topic":"%s"}:{"lastUpdateTimestamp":%d,"maxOffset":%d,"minOffset":%d}'
        % (broker.encode(), q, topic.encode(), 1700000000000 + q, hi, lo) for q, lo, hi in entries) + b"}}"


def test_topic_stats_bodies_fast_and_slow(monkeypatch):
    entries = [(7, 3, 9), (0, 0, 0), (12, 100, 1 << 40)]   # a HashMap's order, as 4.9.8 writes it
    slow_calls = []
    real_slow = topic_stats._parse_topic_stats_slow
    monkeypatch.setattr(topic_stats, "_parse_topic_stats_slow", lambda *a: slow_calls.append(1) or real_slow(*a))
    ids, low, high = parse_topic_stats(_stats_body(entries), "T")
    assert (ids.tolist(), low.tolist(), high.tolist()) == ([7, 0, 12], [3, 0, 100], [9, 0, 1 << 40])
    assert slow_calls == []
    # another topic's entries are left out; a pretty-printed body or other field order takes the slow path
    mixed = _stats_body(entries).replace(b'"queueId":0,"topic":"T"', b'"queueId":0,"topic":"U"')
    assert parse_topic_stats(mixed, "T")[0].tolist() == [7, 12]
    pretty = _stats_body(entries).replace(b",", b",\n\t")
    reordered = _stats_body(entries).replace(b'"lastUpdateTimestamp":1700000000007,"maxOffset":9,"minOffset":3',
                                             b'"minOffset":3,"maxOffset":9,"lastUpdateTimestamp":1700000000007')
    for body in (pretty, reordered):
        got = parse_topic_stats(body, "T")
        assert sorted(zip(*(a.tolist() for a in got), strict=True)) == [(0, 0, 0), (7, 3, 9), (12, 100, 1 << 40)]
    assert len(slow_calls) == 2
    assert [a.tolist() for a in parse_topic_stats(b'{"offsetTable":{}}', "T")] == [[], [], []]
    for bad, what in ((b"not json", "not valid JSON"), (b'{"x":1}', "no offsetTable"),
                      (b'{"offsetTable":{{"queueId":1,"topic":"T"}:{"maxOffset":"9","minOffset":0}}}', "integer"),
                      (b'{"offsetTable":[1]}', "no offsetTable")):
        with pytest.raises(BodyError, match=what) as err:
            parse_topic_stats(bad, "T", "127.0.0.1:1")
        assert "127.0.0.1:1" in str(err.value)


def _create_topic(addr: str, topic: str, read: int, write: int) -> None:
    from rocketstream.remoting import RemotingCommand, RequestCode, connect

    async def go():
        ch = await connect(addr)
        try:
            return await ch.invoke(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
                "topic": topic, "defaultTopic": "TBW102", "readQueueNums": read, "writeQueueNums": write,
                "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False}), 10)
        finally:
            ch.close()

    resp = asyncio.run(go())
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def test_network_bounds_equal_per_queue_answers_and_commits_skip_what_the_broker_has(mq_broker, monkeypatch):
    """One GET_TOPIC_STATS_INFO answers queues 0..writeQueueNums-1; readable queues beyond (readQueueNums 6 >
    writeQueueNums 4) are asked one by one; a topic the broker does not have is asked per queue too."""
    from tests.client.scenario_util import unique, wait_for

    topic = unique("PlanStats")
    _create_topic(mq_broker.broker_addr, topic, read=6, write=4)
    api = MQClientAPI(mq_broker.namesrv_addr)

    async def put() -> None:
        from rocketstream.client.common import Message

        for q in range(4):
            await api.send_batch(mq_broker.broker_addr, mq_broker.broker_name,
                                 [Message(topic, b"x" * (q + 1))] * (q + 2), q, producer_group="PlanP")

    asyncio.run(put())
    location = NetworkBroker(mq_broker.broker_name, mq_broker.broker_addr, mq_broker.namesrv_addr, "PlanG",
                             ((topic, tuple(range(6))), ("PlanNoSuchTopic", (0, 1))))
    view = location.open()
    # A send is answered once the message is in the commit log; its consume-queue unit (what both answers
    # below count) is written after, by the broker's dispatch (ReputMessageService): wait for it.
    wait_for(lambda: [b.max for b in view.queue_bounds(topic, range(4)).values()] == [2, 3, 4, 5], 30,
             "the sent messages in the consume queues")
    answered = view._run(view.api.topic_stats(view.addr, topic))
    assert sorted(answered[0].tolist()) == [0, 1, 2, 3]   # getTopicStatsInfo lists writeQueueNums queues only
    ids, low, high = view.bounds_array(topic)
    per_queue = view.queue_bounds(topic, list(range(6)))
    assert ids.tolist() == list(range(6))
    assert list(zip(low.tolist(), high.tolist(), strict=True)) == [tuple(per_queue[q]) for q in range(6)]
    assert high.tolist() == [2, 3, 4, 5, 0, 0]
    missing = view.bounds_array("PlanNoSuchTopic")   # TOPIC_NOT_EXIST: per-queue answers
    assert missing[0].tolist() == [0, 1] and missing[2].tolist() == [0, 0]

    # commits: what the broker acknowledged on this connection is not sent again ...
    options = parse_options({"nameServer": mq_broker.namesrv_addr, "topic": topic, "consumerGroup": "PlanG"},
                            streaming=True)
    views = {view.broker_name: view}
    committer = OffsetCommits()

    def commit(offsets: dict[int, int]) -> None:
        committer.commit(options, views, {QueueKey(topic, view.broker_name, q): o for q, o in offsets.items()})

    sent: list[tuple[int, int]] = []
    real_update = view.api.update_offset

    async def counting(addr, group, t, q, o, **kw):
        sent.append((q, o))
        return await real_update(addr, group, t, q, o, **kw)

    monkeypatch.setattr(view.api, "update_offset", counting)
    commit({0: 1, 1: 2, 2: 3, 3: 4})
    commit({0: 1, 1: 2, 2: 3, 3: 5})
    assert sent == [(0, 1), (1, 2), (2, 3), (3, 4), (3, 5)]
    sent.clear()
    commit({0: 1, 1: 2, 2: 3, 3: 5})   # the same offsets again: nothing at all
    assert sent == []
    assert view.query_offsets("PlanG", topic, range(4)) == {0: 1, 1: 2, 2: 3, 3: 5}
    # ... but a new connection (a restarted broker may have lost them) sends everything again
    async def drop() -> None:   # on the view's loop, as a dropped connection is noticed
        view.api.close_channel(mq_broker.broker_addr)

    view._run(drop())
    sent.clear()
    commit({0: 1, 1: 2, 2: 3, 3: 6})
    commit({0: 1, 1: 2, 2: 3, 3: 5})
    assert sent == [(0, 1), (1, 2), (2, 3), (3, 6), (3, 5)]
    # and so does the periodic full commit (a table changed behind the query's back converges)
    monkeypatch.setattr(commits, "FULL_COMMIT_S", 0.0)
    sent.clear()
    commit({0: 1, 1: 2, 2: 3, 3: 6})
    assert len(sent) == 4
    asyncio.run(api.close())


# ---- consumerOffset.json --------------------------------------------------------------------------------

def test_int_maps_are_dumped_as_before():
    table = {"offsetTable": {"T@g": {0: 5, 1: 1 << 40, 10: 0}, "U@g": {}, "V@g": {True: 1}}}
    assert dump_fastjson(table) == ('{\n\t"offsetTable":{\n\t\t"T@g":{0:5,1:1099511627776,10:0\n\t\t},\n\t\t"U@g":{},'
                                    '\n\t\t"V@g":{true:1\n\t\t}\n\t}\n}')


def test_offset_file_parse_cache_never_hides_another_writer(tmp_path):
    manager = ConsumerOffsetManager(tmp_path)
    manager.commit("g", "T", {0: 5, 1: 6})
    path = tmp_path / "config" / "consumerOffset.json"
    assert manager.offsets_of("g", "T") == {0: 5, 1: 6}
    manager.table()["T@g"][0] = 99   # callers get their own copy
    assert manager.offsets_of("g", "T") == {0: 5, 1: 6}
    path.write_text(path.read_text().replace("0:5", "0:7"))   # same size, another writer's content
    assert manager.offsets_of("g", "T") == {0: 7, 1: 6}
    manager.commit("g", "T", {1: 8})
    assert ConsumerOffsetManager(tmp_path).offsets_of("g", "T") == {0: 7, 1: 8}
    path.write_text("{garbage")   # a damaged main file: the .bak rule, as without the cache
    assert manager.offsets_of("g", "T") == {0: 7, 1: 6}
