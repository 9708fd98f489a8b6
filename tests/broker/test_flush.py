"""The broker's flush thread (broker/flush.py): store flushes leave the event loop, SYNC_FLUSH sends are
answered once their bytes are synced (grouped), and stop waits for the flush in progress."""

from __future__ import annotations

import asyncio
import threading
import time

from rocketstream.broker.flush import FlushService
from rocketstream.remoting.codes import ResponseCode
from rocketstream.store.message_store import MessageStore
from rocketstream.store.write.messages import Message
from tests.broker import brokerutil as bu


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_periodic_flush_runs_in_its_thread_and_moves_the_checkpoint(tmp_path):
    store = MessageStore.open(tmp_path / "s", create=True)
    try:
        flusher = FlushService(store, interval_ms=10, sync_timeout_ms=5000)
        assert store.background_flush
        seen: list[str] = []
        sync = store.sync_planned

        def spy(plan):
            seen.append(threading.current_thread().name)
            sync(plan)
        store.sync_planned = spy   # type: ignore[method-assign]
        r = store.put_message(Message("T", b"x" * 100), 0)
        assert store.commit_log.queue.last.flushed_position < r.physical_offset + r.wrote_bytes

        async def go():
            await flusher.flush_now()
            await flusher.stop()
        run(go())
        assert seen and all(name.startswith("store-flush") for name in seen)
        mf = store.commit_log.queue.last
        assert mf.flushed_position == mf.wrote_position
        assert store.checkpoint.physic_msg_timestamp == r.store_timestamp
        assert store.checkpoint.logics_msg_timestamp == r.store_timestamp
        cq = store._queues[("T", 0)]
        assert all(f.flushed_position == f.wrote_position for f in cq.queue.files)
    finally:
        store.close()


def test_waiting_sends_share_one_flush_and_stop_waits_for_it(tmp_path):
    store = MessageStore.open(tmp_path / "s", create=True)
    try:
        flusher = FlushService(store, interval_ms=10_000, sync_timeout_ms=5000)
        plans = []
        sync = store.sync_planned

        def slow(plan):
            time.sleep(0.2)   # the loop keeps running meanwhile
            sync(plan)
            plans.append(plan)
        store.sync_planned = slow   # type: ignore[method-assign]

        async def go():
            ends = []
            for _ in range(5):
                r = store.put_message(Message("T", b"y" * 50), 0)
                ends.append(r.physical_offset + r.wrote_bytes)
            ticks = 0

            async def ticker():
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1
            t = asyncio.get_running_loop().create_task(ticker())
            results = await asyncio.gather(*(flusher.wait_durable(e) for e in ends))
            t.cancel()
            assert results == [True] * 5
            assert ticks >= 10            # the loop was not blocked by the 200 ms sync
            assert len(plans) == 1        # one flush covered all five sends
            # a send waiting when stop comes is answered after stop's own flush, not abandoned
            r = store.put_message(Message("T", b"z"), 0)
            waiter = asyncio.get_running_loop().create_task(flusher.wait_durable(r.physical_offset + r.wrote_bytes))
            await asyncio.sleep(0.05)     # its flush is in progress
            await flusher.stop()
            assert await waiter is True
        run(go())
        mf = store.commit_log.queue.last
        assert mf.flushed_position == mf.wrote_position
    finally:
        store.close()


def test_sync_flush_broker_answers_sends_after_the_flush(tmp_path):
    async def go():
        async with bu.broker(tmp_path, flush_disk_type="SYNC_FLUSH") as b:
            ch = await bu.client(b)
            try:
                resp = await ch.invoke(bu.send_v2("TopicS", b"hello", queue_id=0), 10)
                assert resp.code == ResponseCode.SUCCESS, resp.remark
                mf = b.store.commit_log.queue.last
                assert mf.flushed_position == mf.wrote_position   # synced before the answer
            finally:
                await ch.aclose()
    run(go())
