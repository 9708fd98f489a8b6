"""Local mode over a store a live broker serves: consumerGroup offsets go through the broker or the query fails."""

from __future__ import annotations

import pytest

from rocketstream.errors import OptionError
from rocketstream.spark import positions
from rocketstream.spark.brokers import broker_locations
from rocketstream.spark.commits import commit_offsets
from rocketstream.spark.offset_ranges import QueueKey
from rocketstream.spark.options import parse_options
from spark_stores import TOPIC, fill
from tests.broker.conftest import start_serve, stop_serve


def test_group_commit_goes_through_our_live_broker(tmp_path):
    store = tmp_path / "store"
    fill(store, 8)
    served = start_serve(tmp_path / "home", store=store)
    try:
        base = {"path": str(store), "topic": TOPIC, "consumerGroup": "g-live"}
        options = parse_options(base, streaming=True)
        brokers = broker_locations(options)
        with positions.open_views(brokers) as views:
            q = QueueKey(TOPIC, brokers[0].name, 0)
            with pytest.raises(OptionError, match="brokerAddr") as err:
                commit_offsets(options, views, {q: 2})
            assert "lock" in str(err.value) and "nameServer" in str(err.value)
        options = parse_options({**base, "brokerAddr": f"127.0.0.1:{served.broker_port}"}, streaming=True)
        brokers = broker_locations(options)
        with positions.open_views(brokers) as views:
            commit_offsets(options, views, {q: 2})
            assert positions.read_committed(options, views, [q]) == {q: 2}   # asked of the broker
    finally:
        stop_serve(served)
    from rocketstream.store.meta.offsets import ConsumerOffsetManager

    assert ConsumerOffsetManager(store, read_only=True).offsets_of("g-live", TOPIC) == {0: 2}  # persisted by it


def test_broker_addr_is_checked():
    with pytest.raises(OptionError, match="brokerAddr"):
        parse_options({"path": "/x", "topic": "T", "brokerAddr": "nohost"}, streaming=False)
    with pytest.raises(OptionError, match="brokerAddr"):
        parse_options({"brokers": "a=/x", "topic": "T", "brokerAddr": "h:1"}, streaming=False)


def test_group_commit_goes_through_the_real_4_9_8_broker(mq_broker, spark, tmp_path):
    """The same rule against Apache RocketMQ 4.9.8 serving its store (``mq_broker`` "java"): its JVM
    (BrokerStartup) holds the store's lock; without ``brokerAddr`` a commit is refused naming it; with it, a
    local-mode stream's consumerGroup offsets go to the broker (QUERY_CONSUMER_OFFSET answers them, they
    survive the broker's 5 s rewrite of consumerOffset.json and land in it), and a local-mode batch with
    startingOffsets=group starts where the broker says."""
    import asyncio
    import json
    import time

    from rocketstream.client.api import MQClientAPI
    from rocketstream.store.files.lock import is_broker_process, lock_holder
    from rocketstream.store.meta.offsets import ConsumerOffsetManager
    from tests.client.scenario_util import produce, unique

    if mq_broker.kind != "java":
        pytest.skip("our broker: test_group_commit_goes_through_our_live_broker")
    store, addr, name = mq_broker.home / "store", mq_broker.broker_addr, mq_broker.broker_name
    topic, group = unique("LiveJ"), unique("g-live-java")
    produce(mq_broker.namesrv_addr, topic, [f"m{i}".encode() for i in range(24)])
    pid = lock_holder(store)
    assert pid == mq_broker.procs[0].pid and is_broker_process(pid)   # the JVM itself, by its cmdline

    base = {"path": str(store), "brokerName": name, "topic": topic, "consumerGroup": group}
    options = parse_options(base, streaming=True)
    brokers = broker_locations(options)
    with positions.open_views(brokers) as views:
        with pytest.raises(OptionError, match="brokerAddr") as err:
            commit_offsets(options, views, {QueueKey(topic, name, 0): 1})
        assert f"process {pid} holds the lock" in str(err.value) and "5 s" in str(err.value)

    seen: list[tuple[int, int]] = []
    stream = spark.readStream.format("rocketmq")
    for k, v in {**base, "brokerAddr": addr}.items():
        stream = stream.option(k, v) if k != "path" else stream
    query = (stream.load(str(store)).writeStream
             .foreachBatch(lambda df, _: seen.extend(tuple(r) for r in df.select("queueId", "queueOffset").collect()))
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert query.exception() is None
    assert len(seen) == len(set(seen)) == 24
    last = max((tmp_path / "ckpt" / "offsets").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    want = {int(q): o for q, o in json.loads(last.read_text().splitlines()[-1])[topic][name].items()}
    assert sum(want.values()) == 24

    async def broker_table() -> dict[int, int]:
        api = MQClientAPI(mq_broker.namesrv_addr)
        try:
            return {q: await api.query_offset(addr, group, topic, q) for q in want}
        finally:
            await api.close()

    assert asyncio.run(broker_table()) == want
    deadline = time.monotonic() + 20   # ConsumerOffsetManager.persist: every flushConsumerOffsetInterval (5 s)
    while ConsumerOffsetManager(store, read_only=True).offsets_of(group, topic) != want:
        assert time.monotonic() < deadline, "the broker did not persist the group's offsets within 20 s"
        time.sleep(0.5)
    assert asyncio.run(broker_table()) == want   # and what it keeps in memory still says the same

    produce(mq_broker.namesrv_addr, topic, [f"n{i}".encode() for i in range(5)])
    rest = (spark.read.format("rocketmq").option("brokerName", name).option("topic", topic)
            .option("consumerGroup", group).option("brokerAddr", addr).option("startingOffsets", "group")
            .load(str(store)).collect())
    assert sorted(r.body for r in rest) == sorted(f"n{i}".encode() for i in range(5))
