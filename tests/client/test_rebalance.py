"""RebalanceImpl's allocation and processQueueTable diff, computePullFromWhere's table (spec §5.8), and the
offset stores, with the network replaced by fakes."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from rocketstream.client.allocate import MessageQueue, allocate_all
from rocketstream.client.offset_store import (
    LocalFileOffsetStore,
    LocalOffsetStore,
    ReadOffsetType,
    RemoteBrokerOffsetStore,
)
from rocketstream.client.process_queue import ProcessQueue
from rocketstream.client.rebalance import (
    BROADCASTING,
    CLUSTERING,
    CONSUME_FROM_FIRST_OFFSET,
    CONSUME_FROM_LAST_OFFSET,
    CONSUME_FROM_TIMESTAMP,
    RebalanceImpl,
    Subscription,
    parse_consume_timestamp,
)
from rocketstream.client.subscription import SubscriptionData
from rocketstream.errors import BrokerResponseError, OffsetFileError, OptionError, RemotingConnectError


def mqs(topic: str = "T", n: int = 8, brokers: tuple[str, ...] = ("broker-a", "broker-b")) -> set[MessageQueue]:
    return {MessageQueue(topic, b, q) for b in brokers for q in range(n // len(brokers))}


class FakeBroker:
    """RemoteBrokerOffsetStore's broker side."""

    def __init__(self, offsets: dict[MessageQueue, int] | None = None, fail: Exception | None = None) -> None:
        self.offsets = dict(offsets or {})
        self.fail = fail
        self.updates: list[tuple[MessageQueue, int]] = []

    async def query_offset(self, mq: MessageQueue) -> int | None:
        if self.fail:
            raise self.fail
        return self.offsets.get(mq)

    async def update_offset(self, mq: MessageQueue, offset: int, oneway: bool = True) -> None:
        self.updates.append((mq, offset))


class FakeRebalance(RebalanceImpl):
    def __init__(self, cid: str, cids: list[str], *, model: str = CLUSTERING, lockable: set[MessageQueue] | None = None,
                 store: Any = None, max_offsets: int = 100, **kw: Any) -> None:
        super().__init__("g", model, "AVG", instance=None,
                         offset_store=store or RemoteBrokerOffsetStore("g", FakeBroker()), **kw)
        self.cid, self.cids, self.lockable = cid, cids, lockable
        self.removed: list[MessageQueue] = []
        self.dispatched: list[Any] = []
        self.changed: list[tuple[str, set[MessageQueue]]] = []
        self.max_offsets = max_offsets
        self.searched: list[int] = []

    @property
    def client_id(self) -> str:
        return self.cid

    async def find_consumer_ids(self, topic: str) -> list[str] | None:
        return self.cids

    async def lock(self, mq: MessageQueue) -> bool:
        return self.lockable is None or mq in self.lockable

    async def unlock(self, mq: MessageQueue, *, oneway: bool) -> None:
        pass

    async def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        self.removed.append(mq)
        return await super().remove_unnecessary_message_queue(mq, pq)

    def dispatch_pull_requests(self, requests: list[Any]) -> None:
        self.dispatched += requests

    async def message_queue_changed(self, topic: str, mq_all: set[MessageQueue], mq_divided: set[MessageQueue]) -> None:
        self.changed.append((topic, set(mq_divided)))

    async def max_offset(self, mq: MessageQueue) -> int:
        return self.max_offsets

    async def search_offset(self, mq: MessageQueue, ts_ms: int) -> int:
        self.searched.append(ts_ms)
        return 42


def sub(topic: str = "T") -> Subscription:
    return Subscription(topic, SubscriptionData.parse("*"))


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_clustering_takes_exactly_the_allocated_queues_and_diffs_on_change() -> None:
    all_q = mqs()
    cids = ["c1", "c2", "c3"]
    expected = allocate_all("AVG", all_q, cids)
    rb = FakeRebalance("c2", cids)
    rb.subscription_inner["T"] = sub()
    rb.topic_subscribe_info["T"] = all_q

    async def scenario() -> None:
        await rb.do_rebalance(False)
        assert set(rb.process_queue_table) == set(expected["c2"])
        assert {r.message_queue for r in rb.dispatched} == set(expected["c2"])
        assert rb.changed == [("T", set(expected["c2"]))]
        # nothing changed: no new requests, no change callback
        rb.dispatched.clear()
        await rb.do_rebalance(False)
        assert rb.dispatched == [] and len(rb.changed) == 1
        # c3 leaves: c2 gets the AVG share of two consumers; dropped queues are marked dropped
        old = dict(rb.process_queue_table)
        rb.cids = ["c1", "c2"]
        await rb.do_rebalance(False)
        now = allocate_all("AVG", all_q, rb.cids)["c2"]
        assert set(rb.process_queue_table) == set(now)
        for mq, pq in old.items():
            assert pq.dropped == (mq not in now)
        assert set(rb.removed) == set(old) - set(now)
    run(scenario())


def test_broadcasting_takes_every_queue() -> None:
    rb = FakeRebalance("c1", ["c1", "c2"], model=BROADCASTING)
    rb.subscription_inner["T"] = sub()
    rb.topic_subscribe_info["T"] = mqs()
    run(rb.do_rebalance(False))
    assert set(rb.process_queue_table) == mqs()


def test_orderly_skips_a_queue_it_cannot_lock_and_marks_the_others_locked() -> None:
    all_q = mqs(n=4, brokers=("broker-a",))
    lockable = {MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-a", 2)}
    rb = FakeRebalance("c1", ["c1"], lockable=lockable)
    rb.subscription_inner["T"] = sub()
    rb.topic_subscribe_info["T"] = all_q
    run(rb.do_rebalance(True))
    assert set(rb.process_queue_table) == lockable
    assert all(pq.locked for pq in rb.process_queue_table.values())


def test_no_consumer_ids_or_no_queues_changes_nothing() -> None:
    rb = FakeRebalance("c1", [])
    rb.subscription_inner["T"] = sub()
    rb.topic_subscribe_info["T"] = mqs()
    run(rb.do_rebalance(False))
    assert rb.process_queue_table == {}
    rb2 = FakeRebalance("c9", ["c1"])   # not a member of the group: allocated nothing
    rb2.subscription_inner["T"] = sub()
    rb2.topic_subscribe_info["T"] = mqs()
    run(rb2.do_rebalance(False))
    assert rb2.process_queue_table == {}


def test_unsubscribed_topic_queues_are_truncated() -> None:
    rb = FakeRebalance("c1", ["c1"])
    rb.subscription_inner["T"] = sub()
    rb.topic_subscribe_info["T"] = mqs()
    run(rb.do_rebalance(False))
    pqs = list(rb.process_queue_table.values())
    del rb.subscription_inner["T"]
    run(rb.do_rebalance(False))
    assert rb.process_queue_table == {} and all(pq.dropped for pq in pqs)


MQ = MessageQueue("T", "broker-a", 0)
RETRY = MessageQueue("%RETRY%g", "broker-a", 0)


@pytest.mark.parametrize(("where", "stored", "mq", "expected"), [
    (CONSUME_FROM_LAST_OFFSET, 7, MQ, 7),
    (CONSUME_FROM_LAST_OFFSET, None, MQ, 100),      # new group: max offset
    (CONSUME_FROM_LAST_OFFSET, None, RETRY, 0),     # new group, retry topic: 0
    (CONSUME_FROM_FIRST_OFFSET, None, MQ, 0),
    (CONSUME_FROM_FIRST_OFFSET, 9, MQ, 9),
    (CONSUME_FROM_TIMESTAMP, None, MQ, 42),         # searched by timestamp
    (CONSUME_FROM_TIMESTAMP, None, RETRY, 100),     # retry topic: max offset
    (CONSUME_FROM_TIMESTAMP, 3, MQ, 3),
])
def test_compute_pull_from_where(where: str, stored: int | None, mq: MessageQueue, expected: int) -> None:
    broker = FakeBroker({mq: stored} if stored is not None else {})
    rb = FakeRebalance("c1", ["c1"], store=RemoteBrokerOffsetStore("g", broker), consume_from_where=where,
                       consume_timestamp_ms=1234)
    assert run(rb.compute_pull_from_where(mq)) == expected
    if where == CONSUME_FROM_TIMESTAMP and stored is None and mq is MQ:
        assert rb.searched == [1234]


def test_compute_pull_from_where_broker_error_means_none_and_connection_error_skips() -> None:
    err = BrokerResponseError(22, "not found", addr="x:1")
    rb = FakeRebalance("c1", ["c1"], store=RemoteBrokerOffsetStore("g", FakeBroker(fail=err)),
                       consume_from_where=CONSUME_FROM_FIRST_OFFSET)
    assert run(rb.compute_pull_from_where(MQ)) == 0
    down = RemotingConnectError("refused", addr="x:1")
    rb = FakeRebalance("c1", ["c1"], store=RemoteBrokerOffsetStore("g", FakeBroker(fail=down)))
    assert run(rb.compute_pull_from_where(MQ)) == -1   # skipped this time (-2 from the store)
    rb.subscription_inner["T"] = sub()
    rb.topic_subscribe_info["T"] = {MQ}
    run(rb.do_rebalance(False))
    assert rb.process_queue_table == {}


def test_parse_consume_timestamp() -> None:
    assert parse_consume_timestamp(1700000000000) == 1700000000000
    assert parse_consume_timestamp("20240101000000") > 0
    for bad in ("2024-01-01", -1, 1.5, True):
        with pytest.raises(OptionError, match="consume_timestamp"):
            parse_consume_timestamp(bad)


# ------------------------------------------------------------------------------------- offset stores

def test_remote_store_memory_increase_only_and_persist_all() -> None:
    broker = FakeBroker()
    store = RemoteBrokerOffsetStore("g", broker)
    store.update_offset(MQ, 10, False)
    store.update_offset(MQ, 5, True)                 # increase only: ignored
    assert store.offset_table[MQ] == 10
    store.update_offset(MQ, 5, False)
    assert store.offset_table[MQ] == 5
    other = MessageQueue("T", "broker-a", 1)
    store.update_offset(other, 3, False)
    run(store.persist_all({MQ}))                     # queues not given are forgotten, as persistAll does
    assert broker.updates == [(MQ, 5)] and other not in store.offset_table
    assert run(store.read_offset(MQ, ReadOffsetType.READ_FROM_MEMORY)) == 5
    assert run(store.read_offset(other, ReadOffsetType.READ_FROM_MEMORY)) == -1


def test_local_file_store_round_trip_in_rocketmq_format(tmp_path: Path) -> None:
    store = LocalFileOffsetStore("10.0.0.1@DEFAULT", "g", tmp_path)
    store.update_offset(MQ, 17, False)
    run(store.persist_all({MQ}))
    assert store.path == tmp_path / "10.0.0.1@DEFAULT" / "g" / "offsets.json"
    text = store.path.read_text()
    assert '"brokerName":"broker-a"' in text and text.rstrip().endswith("}")
    fresh = LocalFileOffsetStore("10.0.0.1@DEFAULT", "g", tmp_path)
    fresh.load()
    assert fresh.offset_table == {MQ: 17}
    assert run(fresh.read_offset(MessageQueue("T", "broker-a", 1), ReadOffsetType.READ_FROM_STORE)) == -1
    store.update_offset(MQ, 20, False)
    store.persist_now()
    assert LocalOffsetStore(tmp_path, "10.0.0.1@DEFAULT", "g").read_offset(MQ) == 20
    assert (store.path.parent / "offsets.json.bak").exists()   # the previous version kept, as string2File does


def test_local_file_store_corrupt_file_falls_back_to_bak_else_raises(tmp_path: Path) -> None:
    store = LocalFileOffsetStore("ip@DEFAULT", "g", tmp_path)
    store.update_offset(MQ, 1, False)
    store.persist_now()
    store.update_offset(MQ, 2, False)
    store.persist_now()
    store.path.write_text("{not json")
    fresh = LocalFileOffsetStore("ip@DEFAULT", "g", tmp_path)
    fresh.load()
    assert fresh.offset_table == {MQ: 1}             # from offsets.json.bak
    (store.path.parent / "offsets.json.bak").write_text("garbage")
    with pytest.raises(OffsetFileError, match="offsets.json"):
        LocalFileOffsetStore("ip@DEFAULT", "g", tmp_path).load()
