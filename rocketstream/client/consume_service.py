"""``ConsumeMessageConcurrentlyService`` and ``ConsumeMessageOrderlyService`` (seeds 000/001/004, 4.9.8).

Both run the user's listener (a plain function) in a ThreadPoolExecutor of ``consume_thread_max`` threads.

Concurrent: each pulled batch is cut into ``consume_message_batch_max_size`` pieces, one ``ConsumeRequest`` each.
``CONSUME_SUCCESS`` up to ``context.ack_index`` consumes; the rest (all of it for ``RECONSUME_LATER``, for an
exception, or for a listener returning None) is sent back to the broker (CONSUMER_SEND_MSG_BACK, falling back
to sending a copy to ``%RETRY%<group>``) in CLUSTERING, dropped with a warning in BROADCASTING. A message whose
send-back failed stays in the ProcessQueue and is consumed again 5 s later. The offset given to the offset store
is :meth:`ProcessQueue.remove_messages`' answer: the smallest offset still in flight.

Orderly: one ``ConsumeRequest`` per queue at a time (``ProcessQueue.consuming``), under a per-queue lock and the
ProcessQueue's ``consume_lock``; in CLUSTERING only while the broker lock is held and not expired (30 s).
``SUSPEND_CURRENT_QUEUE_A_MOMENT`` (or an exception) puts the messages back and retries the queue after
``suspend_current_queue_time_millis``; a message that reached ``max_reconsume_times`` is sent to
``%RETRY%<group>`` with that many reconsume times, which the broker turns into a DLQ message.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from rocketstream.client.allocate import MessageQueue
from rocketstream.client.common import MessageExt
from rocketstream.client.process_queue import ProcessQueue

if TYPE_CHECKING:
    from rocketstream.client.rebalance import RebalanceImpl

__all__ = [
    "ConsumeConcurrentlyStatus",
    "ConsumeOrderlyStatus",
    "ConsumeConcurrentlyContext",
    "ConsumeOrderlyContext",
    "ConsumeMessageConcurrentlyService",
    "ConsumeMessageOrderlyService",
    "CONSUME_REQUEST_LATER_DELAY_S",
    "MAX_TIME_CONSUME_CONTINUOUSLY_S",
]

log = logging.getLogger("rocketstream.client")

CONSUME_REQUEST_LATER_DELAY_S = 5.0       # submitConsumeRequestLater (concurrent): 5 s
CONSUME_TIMEOUT_MINUTES = 15.0            # DefaultMQPushConsumer.consumeTimeout (cleanExpireMsg's period too)
EXPIRED_MSG_DELAY_LEVEL = 3               # cleanExpiredMsg: sendMessageBack(msg, 3)
MAX_TIME_CONSUME_CONTINUOUSLY_S = 60.0    # ConsumeMessageOrderlyService.MAX_TIME_CONSUME_CONTINUOUSLY
TRY_LOCK_LATER_NOT_LOCKED_S = 0.010       # tryLockLaterAndReconsume(..., 10) in the consume loop
TRY_LOCK_LATER_S = 0.100                  # tryLockLaterAndReconsume(..., 100) before it
PROPERTY_CONSUME_START_TIME = "CONSUME_START_TIME"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"


class ConsumeConcurrentlyStatus(enum.Enum):
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeOrderlyStatus(enum.Enum):
    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


@dataclass
class ConsumeConcurrentlyContext:
    """``ConsumeConcurrentlyContext``: ``delay_level_when_next_consume`` 0 lets the broker choose (3 +
    reconsume times), -1 sends straight to the DLQ; ``ack_index`` is the last consumed message on success."""

    message_queue: MessageQueue
    delay_level_when_next_consume: int = 0
    ack_index: int = 2**31 - 1


@dataclass
class ConsumeOrderlyContext:
    message_queue: MessageQueue
    auto_commit: bool = True
    suspend_current_queue_time_millis: int = -1


ConcurrentListener = Callable[[list[MessageExt], ConsumeConcurrentlyContext], Any]
OrderlyListener = Callable[[list[MessageExt], ConsumeOrderlyContext], Any]


class ConsumerHooks(Protocol):
    """What the consume services need of the push consumer."""

    group: str
    message_model: str
    consume_message_batch_max_size: int
    suspend_current_queue_time_millis: int
    loop: asyncio.AbstractEventLoop
    rebalance: RebalanceImpl

    def effective_max_reconsume_times(self, orderly: bool) -> int: ...
    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None: ...
    def send_message_back(self, msg: MessageExt, delay_level: int, broker_name: str | None) -> bool: ...
    def send_to_retry_topic(self, msg: MessageExt, reconsume_times: int) -> bool: ...


def reset_retry_topic(msgs: Sequence[MessageExt], group: str) -> None:
    """``resetRetryAndNamespace``: a message read from ``%RETRY%<group>`` shows its original topic."""
    retry = "%RETRY%" + group
    for msg in msgs:
        if msg.topic == retry:   # first: other messages' properties stay undecoded
            original = msg.properties.get(PROPERTY_RETRY_TOPIC)
            if original:
                msg.topic = original


def put_properties(msgs: Sequence[MessageExt], pairs: tuple[tuple[str, str], ...]) -> None:
    """``MessageAccessor.putProperty`` of ``pairs`` on every message (MessageExt: without decoding its
    properties; any other message object: its properties dict)."""
    for m in msgs:
        if m.__class__ is MessageExt:
            m.put_properties(pairs)
        else:
            m.properties.update(pairs)


def consume_directly(group: str, listener: Callable[[list[MessageExt], Any], Any], msg: MessageExt,
                     broker_name: str, orderly: bool) -> dict[str, object]:
    """``consumeMessageDirectly`` of both services (CONSUME_MESSAGE_DIRECTLY, client_remoting.py): the
    listener on one message outside any queue (no offset, no retry); ``ConsumeMessageDirectlyResult``."""
    mq = MessageQueue(msg.topic, broker_name, msg.queue_id)
    msgs = [msg]
    reset_retry_topic(msgs, group)
    context: Any = ConsumeOrderlyContext(mq) if orderly else ConsumeConcurrentlyContext(mq)
    result: dict[str, object] = {"order": orderly, "autoCommit": True}
    begin = time.monotonic()
    log.info("%s: consumeMessageDirectly receive new message: %s", group, msg.msg_id)
    try:
        status = listener(msgs, context)
        if status is None:
            result["consumeResult"] = "CR_RETURN_NULL"
        elif status in (ConsumeConcurrentlyStatus.CONSUME_SUCCESS, ConsumeOrderlyStatus.SUCCESS):
            result["consumeResult"] = "CR_SUCCESS"
        else:   # RECONSUME_LATER / SUSPEND_CURRENT_QUEUE_A_MOMENT (anything else is retried too)
            result["consumeResult"] = "CR_LATER"
        if orderly:
            result["autoCommit"] = context.auto_commit
    except Exception as exc:   # the listener's failure is the answer (CR_THROW_EXCEPTION with its text)
        result["consumeResult"] = "CR_THROW_EXCEPTION"
        result["remark"] = f"{type(exc).__name__}: {exc}"
        log.warning("%s: consumeMessageDirectly exception: %s", group, exc, exc_info=exc)
    result["spentTimeMills"] = int((time.monotonic() - begin) * 1000)
    return result


@dataclass
class _Stats:
    consumed_ok: int = 0
    consumed_failed: int = 0
    listener_errors: int = 0
    sent_back: int = 0
    send_back_failed: int = 0
    active: dict[MessageQueue, int] = field(default_factory=dict)


class _ServiceBase:
    def __init__(self, consumer: ConsumerHooks, consume_thread_max: int, name: str) -> None:
        self.consumer = consumer
        self.executor = ThreadPoolExecutor(max_workers=consume_thread_max, thread_name_prefix=name)
        self.stopped = False
        self.stats = _Stats()
        self._stats_lock = threading.Lock()
        self.max_concurrent_per_queue = 0   # highest number of listener calls seen at once on one queue

    def _enter(self, mq: MessageQueue) -> None:
        with self._stats_lock:
            n = self.stats.active.get(mq, 0) + 1
            self.stats.active[mq] = n
            self.max_concurrent_per_queue = max(self.max_concurrent_per_queue, n)

    def _leave(self, mq: MessageQueue) -> None:
        with self._stats_lock:
            self.stats.active[mq] -= 1

    def _submit(self, fn: Callable[[], None]) -> None:
        if self.stopped:
            return
        try:
            self.executor.submit(fn)
        except RuntimeError:   # the executor is shutting down
            log.info("%s: consume request not submitted: the service is stopping", self.consumer.group)

    def _later(self, delay_s: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` (any thread) after ``delay_s`` via the client loop."""
        if self.stopped:
            return
        try:
            self.consumer.loop.call_soon_threadsafe(self.consumer.loop.call_later, delay_s, fn)
        except RuntimeError:   # the loop is closed: the consumer is shutting down
            log.info("%s: delayed consume request dropped: the client loop is closed", self.consumer.group)

    def start(self) -> None:
        """Nothing to start for the concurrent service."""

    def shutdown(self, await_terminate_s: float = 0.0) -> None:
        self.stopped = True
        self.executor.shutdown(wait=await_terminate_s > 0, cancel_futures=True)


class ConsumeMessageConcurrentlyService(_ServiceBase):
    def __init__(self, consumer: ConsumerHooks, listener: ConcurrentListener, consume_thread_max: int) -> None:
        super().__init__(consumer, consume_thread_max, "ConsumeMessageThread_")
        self.listener = listener

    def consume_message_directly(self, msg: MessageExt, broker_name: str) -> dict[str, object]:
        return consume_directly(self.consumer.group, self.listener, msg, broker_name, orderly=False)

    # --- cleanExpireMsg: every consumeTimeout minutes (first after one period), on the client loop
    def start(self) -> None:
        """Schedule ``cleanExpireMsg`` (call on the loop)."""
        self._clean_task = asyncio.get_running_loop().create_task(self._clean_expire_msg_periodically())

    def shutdown(self, await_terminate_s: float = 0.0) -> None:
        task = getattr(self, "_clean_task", None)
        if task is not None:
            try:
                self.consumer.loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:   # the loop is closed: the task went with it
                pass
        super().shutdown(await_terminate_s)

    async def _clean_expire_msg_periodically(self) -> None:
        period_s = getattr(self.consumer, "consume_timeout_minutes", CONSUME_TIMEOUT_MINUTES) * 60
        while not self.stopped:
            await asyncio.sleep(period_s)
            try:
                await asyncio.to_thread(self.clean_expire_msg, period_s)
            except Exception:   # the next period tries again; logged with its traceback
                log.exception("%s: cleanExpireMsg failed", self.consumer.group)

    def clean_expire_msg(self, consume_timeout_s: float) -> int:
        """``cleanExpireMsg``: messages whose listener call started more than ``consume_timeout_s`` ago
        go back to the broker (delay level 3) and leave their process queue (a consume thread)."""
        def send_back(msg: Any) -> bool:
            return self.consumer.send_message_back(msg, EXPIRED_MSG_DELAY_LEVEL, None)
        return sum(pq.clean_expired_msg(consume_timeout_s, send_back)
                   for pq in list(self.consumer.rebalance.process_queue_table.values()) if not pq.dropped)

    def submit_consume_request(self, msgs: Sequence[MessageExt], pq: ProcessQueue, mq: MessageQueue,
                               dispatch_to_consume: bool) -> None:
        """``submitConsumeRequest``: the listener gets ``consume_message_batch_max_size`` messages per call
        (one ``ConsumeRequest`` each, with its own context and result). The ConsumeRequests of one pulled batch
        run one after the other in one consume-thread task, and the batch's consumed messages leave the
        ProcessQueue together (one ``removeMessage`` and offset update): Java submits one task per
        ConsumeRequest, which in Python costs more thread hand-offs than a no-op listener costs. With many
        pulled batches waiting (the usual backlog) every consume thread is still busy."""
        batch = list(msgs)
        if batch:
            self._submit(lambda: self._consume_batch(batch, pq, mq))

    def _consume_batch(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        size = max(1, self.consumer.consume_message_batch_max_size)
        if len(msgs) <= size:
            self._consume(msgs, pq, mq)
            return
        done: list[MessageExt] = []
        tally = [0, 0]   # consumed ok, failed: added to the stats once
        listener, success = self.listener, ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        reset_retry_topic(msgs, self.consumer.group)   # for every ConsumeRequest of the batch at once
        self._enter(mq)
        try:
            for i in range(0, len(msgs), size):
                part = msgs[i:i + size]
                # ConsumeRequest.run (as _consume), inline while the listener succeeds
                if pq.dropped or self.stopped:
                    return   # dropped or stopping: nothing is committed
                put_properties(part, ((PROPERTY_CONSUME_START_TIME, str(int(time.time() * 1000))),))
                context = ConsumeConcurrentlyContext(mq)
                status: object = None
                try:
                    status = listener(list(part), context)
                except Exception:
                    self._listener_raised(part, mq)
                if status is success and context.ack_index >= len(part) - 1 and not pq.dropped:
                    tally[0] += len(part)
                    done += part
                    continue
                remaining = self._after_listener(status, context, part, pq, mq, tally)
                if remaining is None:
                    return
                done += remaining
        finally:
            self._leave(mq)
            with self._stats_lock:
                self.stats.consumed_ok += tally[0]
                self.stats.consumed_failed += tally[1]
        if done and not pq.dropped:
            offset = pq.remove_messages(done)
            if offset >= 0 and not pq.dropped:
                self.consumer.update_offset(mq, offset, True)

    def _consume(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue, *, commit: bool = True,
                 tally: list[int] | None = None) -> list[MessageExt] | None:
        """``ConsumeRequest.run``: the messages to remove from the ProcessQueue (consumed or sent back), None
        when the queue was dropped; ``commit``: remove them and update the offset here. ``tally``: the
        caller counts the call (``_enter``/``_leave``) and adds [consumed, failed] to the stats itself."""
        count = tally is None
        if pq.dropped or self.stopped:
            return None
        context = ConsumeConcurrentlyContext(mq)
        reset_retry_topic(msgs, self.consumer.group)
        put_properties(msgs, ((PROPERTY_CONSUME_START_TIME, str(int(time.time() * 1000))),))
        status: object = None
        if count:
            self._enter(mq)
        try:
            status = self.listener(list(msgs), context)
        except Exception:
            self._listener_raised(msgs, mq)
        finally:
            if count:
                self._leave(mq)
        remaining = self._after_listener(status, context, msgs, pq, mq, tally)
        if remaining is not None and commit:
            offset = pq.remove_messages(remaining)
            if offset >= 0 and not pq.dropped:
                self.consumer.update_offset(mq, offset, True)
        return remaining

    def _listener_raised(self, msgs: list[MessageExt], mq: MessageQueue) -> None:
        """In the ``except`` block: logged with the traceback and counted; the messages are a retry."""
        with self._stats_lock:
            self.stats.listener_errors += 1
        log.exception("%s: listener raised on %d messages of %s; they will be consumed again",
                      self.consumer.group, len(msgs), mq)

    def _after_listener(self, status: object, context: ConsumeConcurrentlyContext, msgs: list[MessageExt],
                        pq: ProcessQueue, mq: MessageQueue, tally: list[int] | None) -> list[MessageExt] | None:
        """``ConsumeRequest.run`` after the listener: its result (None after an exception: a retry) to
        :meth:`_consume_result`; None when the queue was dropped meanwhile."""
        if status is not ConsumeConcurrentlyStatus.CONSUME_SUCCESS:
            if status is not None and status is not ConsumeConcurrentlyStatus.RECONSUME_LATER:
                log.warning("%s: listener returned %r (not a ConsumeConcurrentlyStatus): RECONSUME_LATER",
                            self.consumer.group, status)
            status = ConsumeConcurrentlyStatus.RECONSUME_LATER
        if pq.dropped:
            log.warning("%s: %s dropped while consuming %d messages; not committed", self.consumer.group, mq,
                        len(msgs))
            return None
        assert isinstance(status, ConsumeConcurrentlyStatus)
        return self._consume_result(status, context, msgs, pq, mq, tally)

    def process_consume_result(self, status: ConsumeConcurrentlyStatus, context: ConsumeConcurrentlyContext,
                               msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        """``processConsumeResult``."""
        if not msgs:
            return
        remaining = self._consume_result(status, context, msgs, pq, mq)
        offset = pq.remove_messages(remaining)
        if offset >= 0 and not pq.dropped:
            self.consumer.update_offset(mq, offset, True)

    def _consume_result(self, status: ConsumeConcurrentlyStatus, context: ConsumeConcurrentlyContext,
                        msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue,
                        tally: list[int] | None = None) -> list[MessageExt]:
        """``processConsumeResult`` up to the ProcessQueue: stats (or ``tally``), send-backs; the messages to
        remove (all but those whose send-back failed, consumed again 5 s later)."""
        if not msgs:
            return msgs
        ack_index = context.ack_index
        if status is ConsumeConcurrentlyStatus.CONSUME_SUCCESS:
            ack_index = min(ack_index, len(msgs) - 1)
        else:
            ack_index = -1
        if tally is not None:
            tally[0] += ack_index + 1
            tally[1] += len(msgs) - ack_index - 1
        else:
            with self._stats_lock:
                self.stats.consumed_ok += ack_index + 1
                self.stats.consumed_failed += len(msgs) - ack_index - 1
        remaining = msgs
        if ack_index + 1 >= len(msgs):
            return remaining
        if self.consumer.message_model == "BROADCASTING":
            for msg in msgs[ack_index + 1:]:
                log.warning("%s: BROADCASTING consumption failed, message dropped: %s", self.consumer.group,
                            msg.msg_id)
        else:
            failed: list[MessageExt] = []
            for msg in msgs[ack_index + 1:]:
                if self.consumer.send_message_back(msg, context.delay_level_when_next_consume, mq.broker_name):
                    with self._stats_lock:
                        self.stats.sent_back += 1
                else:
                    with self._stats_lock:
                        self.stats.send_back_failed += 1
                    msg.reconsume_times += 1
                    failed.append(msg)
            if failed:
                failed_ids = {id(m) for m in failed}
                remaining = [m for m in msgs if id(m) not in failed_ids]
                self._later(CONSUME_REQUEST_LATER_DELAY_S,
                            lambda: self.submit_consume_request(failed, pq, mq, True))
        return remaining


class ConsumeMessageOrderlyService(_ServiceBase):
    def __init__(self, consumer: ConsumerHooks, listener: OrderlyListener, consume_thread_max: int, *,
                 lock_interval_s: float) -> None:
        super().__init__(consumer, consume_thread_max, "ConsumeMessageThread_")
        self.listener = listener
        self.lock_interval_s = lock_interval_s
        self._mq_locks: dict[MessageQueue, threading.Lock] = {}   # MessageQueueLock
        self._mq_locks_guard = threading.Lock()
        self._lock_task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """CLUSTERING: renew the broker locks every ``lock_interval_s`` (20 s), first after 1 s (call on
        the loop)."""
        if self.consumer.message_model == "CLUSTERING":
            self._lock_task = asyncio.get_running_loop().create_task(self._lock_periodically())

    async def _lock_periodically(self) -> None:
        await asyncio.sleep(min(1.0, self.lock_interval_s))
        while not self.stopped:
            try:
                await self.consumer.rebalance.lock_all()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: lockMQPeriodically failed", self.consumer.group)
            await asyncio.sleep(self.lock_interval_s)

    def shutdown(self, await_terminate_s: float = 0.0) -> None:
        self.stopped = True
        if self._lock_task is not None:
            self.consumer.loop.call_soon_threadsafe(self._lock_task.cancel)
        super().shutdown(await_terminate_s)

    def _mq_lock(self, mq: MessageQueue) -> threading.Lock:
        with self._mq_locks_guard:
            lock = self._mq_locks.get(mq)
            if lock is None:
                lock = self._mq_locks[mq] = threading.Lock()
            return lock

    def consume_message_directly(self, msg: MessageExt, broker_name: str) -> dict[str, object]:
        return consume_directly(self.consumer.group, self.listener, msg, broker_name, orderly=True)

    def submit_consume_request(self, msgs: Sequence[MessageExt] | None, pq: ProcessQueue, mq: MessageQueue,
                               dispatch_to_consume: bool) -> None:
        if dispatch_to_consume:
            self._submit(lambda: self._consume(pq, mq))

    def submit_consume_request_later(self, pq: ProcessQueue, mq: MessageQueue, delay_s: float) -> None:
        self._later(delay_s, lambda: self.submit_consume_request(None, pq, mq, True))

    def _try_lock_later_and_reconsume(self, pq: ProcessQueue, mq: MessageQueue, delay_s: float) -> None:
        """``tryLockLaterAndReconsume``: lock the queue on the broker, then consume again."""
        async def relock() -> None:
            locked = await self.consumer.rebalance.lock(mq)
            self.submit_consume_request_later(pq, mq, 0.010 if locked else 3.0)

        def fire() -> None:
            if not self.stopped:
                self.consumer.loop.create_task(relock())
        self._later(delay_s, fire)

    def _consume(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        """``ConsumeRequest.run`` of the orderly service."""
        if pq.dropped or self.stopped:
            return
        clustering = self.consumer.message_model == "CLUSTERING"
        with self._mq_lock(mq):
            if clustering and not (pq.locked and not pq.is_lock_expired()):
                if not pq.dropped:
                    self._try_lock_later_and_reconsume(pq, mq, TRY_LOCK_LATER_S)
                return
            begin = time.monotonic()
            while True:
                if pq.dropped or self.stopped:
                    return
                if clustering and not pq.locked:
                    self._try_lock_later_and_reconsume(pq, mq, TRY_LOCK_LATER_NOT_LOCKED_S)
                    return
                if clustering and pq.is_lock_expired():
                    self._try_lock_later_and_reconsume(pq, mq, TRY_LOCK_LATER_NOT_LOCKED_S)
                    return
                if time.monotonic() - begin > MAX_TIME_CONSUME_CONTINUOUSLY_S:
                    self.submit_consume_request_later(pq, mq, 0.010)
                    return
                msgs = pq.take_messages(max(1, self.consumer.consume_message_batch_max_size))
                if not msgs:
                    return
                typed: list[MessageExt] = msgs   # type: ignore[assignment]
                reset_retry_topic(typed, self.consumer.group)
                context = ConsumeOrderlyContext(mq)
                status: object = None
                with pq.consume_lock:
                    if pq.dropped:
                        pq.rollback()
                        return
                    self._enter(mq)
                    try:
                        status = self.listener(list(typed), context)
                    except Exception:
                        with self._stats_lock:
                            self.stats.listener_errors += 1
                        log.exception("%s: orderly listener raised on %d messages of %s; suspending the queue",
                                      self.consumer.group, len(typed), mq)
                    finally:
                        self._leave(mq)
                if status is not ConsumeOrderlyStatus.SUCCESS:
                    if status is not None and status is not ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT:
                        log.warning("%s: orderly listener returned %r: SUSPEND_CURRENT_QUEUE_A_MOMENT",
                                    self.consumer.group, status)
                    status = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                assert isinstance(status, ConsumeOrderlyStatus)
                if not self.process_consume_result(typed, status, context, pq, mq):
                    return

    def process_consume_result(self, msgs: list[MessageExt], status: ConsumeOrderlyStatus,
                               context: ConsumeOrderlyContext, pq: ProcessQueue, mq: MessageQueue) -> bool:
        """``processConsumeResult`` (auto commit): True to go on consuming this queue."""
        go_on = True
        commit_offset = -1
        if status is ConsumeOrderlyStatus.SUCCESS:
            with self._stats_lock:
                self.stats.consumed_ok += len(msgs)
            commit_offset = pq.commit()
        elif self._check_reconsume_times(msgs):
            with self._stats_lock:
                self.stats.consumed_failed += len(msgs)
            pq.make_message_to_consume_again(msgs)
            delay_ms = context.suspend_current_queue_time_millis
            if delay_ms < 0:
                delay_ms = self.consumer.suspend_current_queue_time_millis
            self.submit_consume_request_later(pq, mq, max(delay_ms, 10) / 1000)
            go_on = False
        else:
            commit_offset = pq.commit()
        if commit_offset >= 0 and not pq.dropped:
            self.consumer.update_offset(mq, commit_offset, False)
        return go_on

    def _check_reconsume_times(self, msgs: list[MessageExt]) -> bool:
        """``checkReconsumeTimes``: True to suspend (retry locally); messages over the limit go to the
        broker (and from there to the DLQ) instead."""
        suspend = False
        limit = self.consumer.effective_max_reconsume_times(True)
        for msg in msgs:
            if msg.reconsume_times >= limit:
                msg.properties[PROPERTY_RECONSUME_TIME] = str(msg.reconsume_times)
                if self.consumer.send_to_retry_topic(msg, msg.reconsume_times):
                    with self._stats_lock:
                        self.stats.sent_back += 1
                else:
                    suspend = True
                    msg.reconsume_times += 1
            else:
                suspend = True
                msg.reconsume_times += 1
        return suspend
