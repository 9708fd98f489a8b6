"""``FlushService``: the broker's store flushes in a thread of their own, so the event loop never waits
for the disk (RocketMQ's ``FlushRealTimeService``, ``GroupCommitService`` and
``FlushConsumeQueueService`` run in their own threads too).

Each flush is ``MessageStore.plan_flush`` on the loop (under the store lock: which files, up to where),
``sync_planned`` + ``finish_flush`` in the flush thread (fdatasync with the GIL released, then the
flushed positions and checkpoint timestamps from the plan). One thread: flushes never overlap.

* Periodic (every ``flushIntervalCommitLog`` ms, both flush types): commit log, consume queues and the
  checkpoint, when anything was appended since the last one. Index files are not synced here (the
  store syncs a full index file at its roll and the current one at close, as IndexService does).
* SYNC_FLUSH: a send is answered only once its end is synced - ``wait_durable(end)``. Waiting sends
  are grouped: one commit-log flush covers every send that was appended before it was planned; sends
  arriving meanwhile wait for the next one (GroupCommitService's request lists). After
  ``syncFlushTimeout`` the answer is FLUSH_DISK_TIMEOUT, as in Java.
* ``stop``: waits for the flush in progress (never abandons it mid-way) and completes the sends still
  waiting with one last flush; the store's ``close`` flushes what remains.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging

from rocketstream.errors import RocketStreamError
from rocketstream.store.message_store import FlushPlan, MessageStore

__all__ = ["FlushService"]

log = logging.getLogger("rocketstream.broker")


class FlushService:
    def __init__(self, store: MessageStore, *, interval_ms: int, sync_timeout_ms: int) -> None:
        self.store = store
        self.period = max(interval_ms, 10) / 1000.0
        self.sync_timeout = max(sync_timeout_ms, 1) / 1000.0
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="store-flush")
        self._inflight: set[concurrent.futures.Future[None]] = set()
        self._waiters: list[tuple[int, asyncio.Future[bool]]] = []
        self._group: asyncio.Task[None] | None = None
        self._durable = -1        # commit-log offset known synced
        self._full_to = -1        # commit-log end of the last periodic (full) flush
        self._stopped = False
        store.background_flush = True

    def _sync(self, plan: FlushPlan) -> None:
        self.store.sync_planned(plan)
        self.store.finish_flush(plan)

    async def _run(self, plan: FlushPlan) -> None:
        """Sync ``plan`` in the flush thread; a cancelled caller leaves it running (``stop`` waits for it)."""
        cf = self._executor.submit(self._sync, plan)
        self._inflight.add(cf)
        cf.add_done_callback(self._inflight.discard)
        await asyncio.shield(asyncio.wrap_future(cf))
        self._advance(plan.commit_log_end)

    def _advance(self, end: int) -> None:
        if end > self._durable:
            self._durable = end
        if self._waiters:
            keep = []
            for want, fut in self._waiters:
                if want <= self._durable:
                    if not fut.done():
                        fut.set_result(True)
                else:
                    keep.append((want, fut))
            self._waiters = keep

    def _fail_waiters(self) -> None:
        waiters, self._waiters = self._waiters, []
        for _, fut in waiters:
            if not fut.done():
                fut.set_result(False)

    # --- the periodic flush (FlushRealTimeService / FlushConsumeQueueService) ---------------------
    async def run_periodic(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            await self.flush_now()

    async def flush_now(self) -> None:
        """Commit log, consume queues and checkpoint, when anything was appended since the last time."""
        if self._stopped or self.store.commit_log_max_offset() == self._full_to:
            return
        try:
            plan = self.store.plan_flush()
            await self._run(plan)
            self._full_to = plan.commit_log_end
        except RocketStreamError:
            log.exception("flushing the store failed")

    # --- SYNC_FLUSH (GroupCommitService) ----------------------------------------------------------
    async def wait_durable(self, end: int) -> bool:
        """True once the commit log is synced up to ``end``; False after ``syncFlushTimeout`` or when a
        flush failed (the send is answered FLUSH_DISK_TIMEOUT)."""
        if end <= self._durable:
            return True
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters.append((end, fut))
        if self._group is None or self._group.done():
            self._group = asyncio.get_running_loop().create_task(self._group_commit(), name="group-commit")
        try:
            return await asyncio.wait_for(asyncio.shield(fut), self.sync_timeout)
        except TimeoutError:
            log.warning("a SYNC_FLUSH send waited more than %.0f ms for its flush", self.sync_timeout * 1000)
            return False

    async def _group_commit(self) -> None:
        while self._waiters and not self._stopped:
            try:
                await self._run(self.store.plan_flush(consume_queues=False, checkpoint=False))
            except RocketStreamError:
                log.exception("flushing the commit log failed")
                self._fail_waiters()

    # --- stop -------------------------------------------------------------------------------------
    async def stop(self) -> None:
        """Wait for the flush in progress, then answer the sends still waiting with one last flush."""
        self._stopped = True
        if self._group is not None and not self._group.done():
            self._group.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._group
        for cf in list(self._inflight):
            with contextlib.suppress(Exception):
                await asyncio.wrap_future(cf)
        if self._waiters:
            try:
                await self._run(self.store.plan_flush(consume_queues=False, checkpoint=False))
            except RocketStreamError:
                log.exception("flushing the commit log failed")
            self._fail_waiters()
        self._executor.shutdown(wait=True)
