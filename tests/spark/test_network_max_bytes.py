"""maxBytesPerTrigger in network mode: message sizes by QUERY_CONSUME_QUEUE (321), paged and only as far as
the budget needs (rocketstream/spark/network/view.py ``query_sizes``; ``rate_limit(byte_cap=...)``).

* ``rate_limit`` with a byte cap: sizes are asked only up to the cap, the budget holds, and the batches
  are those of full size arrays (and of local mode's uncapped weighing when no backlog exceeds the cap).
* ``query_sizes`` on a fake broker: below the min is a DataLossError, a short, long, gapped or foreign
  answer an error naming the queue — never sizes that might be another message's.
* Against both session brokers (``mq_broker``: ours and the real 4.9.8, whose consume-queue files hold 100
  units, so a range crosses files): sizes equal the stored records; a streaming query's micro-batches each
  hold at most maxBytesPerTrigger stored bytes, read every message once, and end where local mode's
  planner over the broker's own store ends them.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadMaxBytes

from rocketstream.client.consume_queue_query import ConsumeQueueAnswer, not_found
from rocketstream.errors import BrokerResponseError, DataLossError, OptionError, RocketStreamError
from rocketstream.remoting import ResponseCode
from rocketstream.spark.network.view import NetworkBroker, NetworkBrokerView, query_sizes
from rocketstream.spark.offset_ranges import QueueKey, rate_limit
from rocketstream.spark.options import parse_options
from rocketstream.spark.schema import projection_for
from rocketstream.spark.stream import RocketMQStreamReader
from tests.broker.test_query_cq import _record_columns, send_to_queue0
from tests.client.scenario_util import produce, unique


def q(i: int) -> QueueKey:
    return QueueKey("T", "b", i)


# ---- rate_limit with a byte cap (pure) -----------------------------------------------------------------

def _fns(table: dict[int, list[int]]):
    calls: list[tuple[int, int, int, int]] = []

    def prefix(queue, start, end, cap):   # the least a network view may give: up to the first size past cap
        sizes = np.array(table[queue.queue_id][start:end], dtype=np.int64)
        n = int(np.searchsorted(np.cumsum(sizes), cap, side="right")) + 1
        calls.append((queue.queue_id, start, end, min(n, len(sizes))))
        return sizes[:n]

    def full(queue, start, end, cap=None):
        return np.array(table[queue.queue_id][start:end], dtype=np.int64)

    return prefix, full, calls


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.integers(0, 5), st.lists(st.integers(1, 300), max_size=40), min_size=1),
       st.integers(1, 2500), st.data())
def test_rate_limit_byte_cap_needs_only_prefixes(table, max_bytes, data):
    start = {k: data.draw(st.integers(0, len(v))) for k, v in table.items()}
    begin, latest = {q(k): v for k, v in start.items()}, {q(k): len(v) for k, v in table.items()}
    prefix, full, calls = _fns(table)
    got = rate_limit(begin, latest, max_bytes=max_bytes, bytes_fn=prefix, byte_cap=max_bytes)
    assert got == rate_limit(begin, latest, max_bytes=max_bytes, bytes_fn=full, byte_cap=max_bytes)
    for qid, a, _, n in calls:   # nothing past the first message that breaks the cap was asked for
        assert sum(table[qid][a:a + n - 1]) <= max_bytes
    ends = {k.queue_id: v for k, v in got.items()}
    used = sum(sum(table[k][start[k]:ends[k]]) for k in table)
    taken = sum(ends[k] - start[k] for k in table)
    if any(start[k] < len(v) for k, v in table.items()):
        assert taken >= 1
    assert used <= max_bytes or taken == 1
    # no backlog above the cap: the capped weighing is local mode's uncapped one
    if all(sum(v[start[k]:]) <= max_bytes for k, v in table.items()):
        assert got == rate_limit(begin, latest, max_bytes=max_bytes, bytes_fn=full)


def test_rate_limit_byte_cap_cost_and_bad_values():
    table = {0: np.full(1_000_000, 100), 1: np.full(1_000_000, 100)}
    prefix, _, calls = _fns(table)
    got = rate_limit({q(0): 0, q(1): 0}, {q(0): 10**6, q(1): 10**6}, max_bytes=1000, bytes_fn=prefix, byte_cap=1000)
    assert got == {q(0): 5, q(1): 5} and [n for *_, n in calls] == [11, 11]   # not two million sizes
    asked = []

    def many(asks, cap):   # network mode's form: every range at once
        asked.append((asks, cap))
        return [prefix(k, a, b, cap) for k, a, b in asks]

    assert rate_limit({q(0): 0, q(1): 0}, {q(0): 10**6, q(1): 10**6}, max_bytes=1000, bytes_many=many,
                      byte_cap=1000) == got
    assert asked == [([(q(0), 0, 10**6), (q(1), 0, 10**6)], 1000)]
    with pytest.raises(RocketStreamError, match="1 size arrays for 2 queue ranges"):
        rate_limit({q(0): 0, q(1): 0}, {q(0): 9, q(1): 9}, max_bytes=10, bytes_many=lambda a, c: [np.ones(9)],
                   byte_cap=10)
    with pytest.raises(RocketStreamError, match="byte_cap"):
        rate_limit({q(0): 0}, {q(0): 3}, max_bytes=10, bytes_fn=prefix, byte_cap=9)
    with pytest.raises(RocketStreamError, match="a prefix only past 50 bytes"):   # a short prefix is refused
        rate_limit({q(0): 0}, {q(0): 30}, max_bytes=50, bytes_fn=lambda *a: np.array([10, 10]), byte_cap=50)


def test_max_bytes_is_an_option_of_both_modes():
    for opts in ({"path": "/tmp/x"}, {"nameServer": "127.0.0.1:9876"}):
        assert parse_options({"topic": "T", "maxBytesPerTrigger": "4096", **opts},
                             streaming=True).max_bytes_per_trigger == 4096
        for bad in ("0", "-1", "1k"):
            with pytest.raises(OptionError, match="maxBytesPerTrigger"):
                parse_options({"topic": "T", "maxBytesPerTrigger": bad, **opts}, streaming=True)


# ---- query_sizes against a fake broker ----------------------------------------------------------------

class FakeApi:
    """A queue of ``n`` units of size 10 + i % 7 in files of ``per_file`` units, from ``low``; ``hook`` may
    rewrite an answer."""

    def __init__(self, n: int, per_file: int = 100, low: int = 0, hook=None) -> None:
        self.n, self.per_file, self.low, self.hook, self.asked = n, per_file, low, hook, []

    async def query_consume_queue(self, addr, topic, queue_id, index, count, group=None, timeout=3.0):
        self.asked.append((index, count))
        if index < self.low or index >= self.n:
            return not_found(topic, queue_id, index, f"Index {index} of {queue_id}@{topic} is not exist!")
        stop = min(self.n, index + count, index - index % self.per_file + self.per_file)
        idx = np.arange(index, stop, dtype=np.int64)
        answer = ConsumeQueueAnswer(topic, queue_id, index, True, self.low, self.n, 10 + idx % 7, idx * 1000,
                                    np.zeros(len(idx), np.int64))
        return self.hook(answer) if self.hook else answer

    async def min_offset(self, addr, topic, queue_id, timeout=3.0):
        return self.low


def sizes_of(api, start, end, cap=None):
    return asyncio.run(query_sizes(api, "127.0.0.1:1", "b", "T", 3, start, end, cap))


def test_query_sizes_pages_file_by_file_and_stops_at_the_cap():
    want = 10 + np.arange(1000) % 7
    api = FakeApi(1000)
    assert np.array_equal(sizes_of(api, 50, 1000), want[50:]) and [i for i, _ in api.asked][:3] == [50, 100, 200]
    api = FakeApi(1_000_000, per_file=300_000)
    got = sizes_of(api, 0, 1_000_000, cap=5000)
    assert got.sum() > 5000 >= got[:-1].sum() and np.array_equal(got, want[:len(got)])
    assert len(api.asked) <= 2 and sum(c for _, c in api.asked) < 3000   # not a million units


@pytest.mark.parametrize("hook,end,error,match", [
    (lambda a: a._replace(sizes=a.sizes[:0], physic_offsets=a.physic_offsets[:0]), 400, RocketStreamError,
     "asked 280 units and got 0"),
    (lambda a: a._replace(sizes=np.concatenate([a.sizes, a.sizes]), physic_offsets=np.arange(2 * len(a.sizes))),
     125, RocketStreamError, "asked 5 units and got 10"),
    (lambda a: a._replace(physic_offsets=a.physic_offsets[::-1].copy()), 400, RocketStreamError, "do not increase"),
    (lambda a: a._replace(physic_offsets=a.physic_offsets - a.from_index * 1000), 400, RocketStreamError,
     "from index 200: .*do not increase"),   # the next page overlaps the last one
    (lambda a: a._replace(sizes=a.sizes * 0), 400, RocketStreamError, "size <= 0"),
    (lambda a: a._replace(max_index=a.from_index + 1), 400, RocketStreamError, "broker max"),
    (lambda a: a._replace(min_index=a.from_index + 5), 400, DataLossError, r"\[120, 125\) of T:3 on b"),
])
def test_query_sizes_refuses_answers_not_for_the_asked_units(hook, end, error, match):
    with pytest.raises(error, match=match) as err:
        sizes_of(FakeApi(500, hook=hook), 120, end)
    assert "T:3 on b (127.0.0.1:1)" in str(err.value)


def test_a_broker_without_query_consume_queue_is_an_option_error():
    class Old(FakeApi):
        async def query_consume_queue(self, *a, **k):
            raise BrokerResponseError(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "request type 321 not supported",
                                      addr="127.0.0.1:1")

    with pytest.raises(OptionError, match="maxBytesPerTrigger.*broker b \\(127.0.0.1:1\\) does not answer"):
        sizes_of(Old(10), 0, 5, 100)


def test_query_sizes_below_min_is_data_loss_and_past_max_an_error():
    with pytest.raises(DataLossError) as err:
        sizes_of(FakeApi(500, low=200), 150, 300)
    assert (err.value.topic, err.value.queue_id, err.value.lost_from, err.value.lost_to) == ("T", 3, 150, 200)
    with pytest.raises(RocketStreamError, match="holds no unit at index 500.*past the queue's end"):
        sizes_of(FakeApi(500), 450, 520)


# ---- against the session's brokers ---------------------------------------------------------------------

def _view(target, topic: str) -> NetworkBrokerView:
    return NetworkBroker(target.broker_name, target.broker_addr, target.namesrv_addr, "qcqSizes",
                         ((topic, (0, 1, 2, 3)),)).open()


def test_sizes_over_the_network_are_the_stored_records(mq_broker):
    topic = unique("QcqS")
    send_to_queue0(mq_broker.namesrv_addr, topic, [b"s" * (1 + i * 13 % 70) for i in range(130)])
    from rocketstream.client.api import MQClientAPI
    api = MQClientAPI(mq_broker.namesrv_addr)
    sizes, _ = _record_columns(api, mq_broker, topic, 130)
    asyncio.run(api.close())
    view = _view(mq_broker, topic)
    assert np.array_equal(view.message_sizes(topic, 0, 0, 130), sizes)   # crosses the Java broker's file end
    assert np.array_equal(view.message_sizes(topic, 0, 97, 103), sizes[97:103])
    capped = view.message_sizes(topic, 0, 10, 130, 1000)
    assert capped[:-1].sum() <= 1000 < capped.sum() and np.array_equal(capped, sizes[10:10 + len(capped)])
    with pytest.raises(RocketStreamError, match=f"{topic}:0 on {mq_broker.broker_name}.*index 130"):
        view.message_sizes(topic, 0, 120, 135)


def test_sizing_race_with_retention_follows_fail_on_data_loss(mq_broker, monkeypatch):
    """Messages removed between planning and sizing (retention; a broker answers below its min): a
    DataLossError, or with failOnDataLoss=false no batch this trigger (the next one re-plans)."""
    from rocketstream.spark.network import view as network_view

    topic = unique("QcqL")
    produce(mq_broker.namesrv_addr, topic, [b"l" * 50 for _ in range(8)])

    async def gone(api, addr, broker_name, topic, queue_id, start, end, byte_cap=None, timeout_s=None):
        raise DataLossError(f"[{start}, {start + 2}) of {topic}:{queue_id} removed", topic=topic,
                            broker_name=broker_name, queue_id=queue_id, lost_from=start, lost_to=start + 2)

    monkeypatch.setattr(network_view, "query_sizes", gone)
    for strict in (True, False):
        opts = parse_options({"nameServer": mq_broker.namesrv_addr, "topic": topic, "startingOffsets": "earliest",
                              "maxBytesPerTrigger": "100", "failOnDataLoss": str(strict).lower()}, streaming=True)
        reader = RocketMQStreamReader(opts, projection_for(None))
        start = reader.initialOffset()
        if strict:
            with pytest.raises(DataLossError, match="removed"):
                reader.latestOffset(start, ReadMaxBytes(100))
        else:
            assert reader.latestOffset(start, ReadMaxBytes(100)) == start


def _local_boundaries(target, topic: str, max_bytes: int) -> list[dict[int, int]]:
    """Every micro-batch end local mode's planner gives over the broker's own store files."""
    opts = parse_options({"path": str(target.home / "store"), "brokerName": target.broker_name, "topic": topic,
                          "brokerAddr": target.broker_addr, "startingOffsets": "earliest",
                          "maxBytesPerTrigger": str(max_bytes)}, streaming=True)
    reader = RocketMQStreamReader(opts, projection_for(None))
    at = reader.initialOffset()
    ends = []
    while True:
        nxt = reader.latestOffset(at, ReadMaxBytes(max_bytes))
        if nxt == at:
            return ends
        ends.append({int(k): v for k, v in nxt[topic][target.broker_name].items()})
        at = nxt


def test_stream_max_bytes_over_the_network(spark, mq_broker, tmp_path):
    topic = unique("QcqM")
    max_bytes = 2200
    sent = produce(mq_broker.namesrv_addr, topic, [b"m" * (20 + i * 37 % 90) for i in range(24)])
    batches: list[list[tuple[int, int, int]]] = []

    def sink(df, batch_id):
        batches.append([(r.queueId, r.queueOffset, r.storeSize)
                        for r in df.select("queueId", "queueOffset", "storeSize").collect()])

    query = (spark.readStream.format("rocketmq").option("nameServer", mq_broker.namesrv_addr).option("topic", topic)
             .option("startingOffsets", "earliest").option("maxBytesPerTrigger", str(max_bytes)).load()
             .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    rows = [r for b in batches for r in b]
    assert sorted((qid, off) for qid, off, _ in rows) == sorted((r.queue.queue_id, r.queue_offset) for r in sent)
    assert len(batches) >= 2 and all(0 < sum(s for *_, s in b) <= max_bytes for b in batches)
    # each queue's backlog (6 messages, < 1,600 bytes) is under the cap: the boundaries are local mode's
    ends, seen = [], {}
    for b in batches:
        for qid, off, _ in b:
            seen[qid] = max(seen.get(qid, 0), off + 1)
        ends.append(dict(seen))
    local = _local_boundaries(mq_broker, topic, max_bytes)
    assert [{k: v for k, v in e.items() if v} for e in local] == ends
