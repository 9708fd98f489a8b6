"""``ConsumeMessageConcurrentlyService`` and ``ConsumeMessageOrderlyService`` (seeds 000/001/004, 4.9.8).

Both run the user's listener (a plain function) in a :class:`ConsumeThreadPool` of ``consume_thread_max`` threads.

Concurrent: each pulled batch is cut into ``consume_message_batch_max_size`` pieces, one listener call each, run
in order by one consume-thread task (RocketMQ's :class:`ConsumeRequest` per piece; a piece consumed whole skips
building one), whose answer goes to ``process_consume_result``.
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
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from rocketstream.client.allocate import MessageQueue
from rocketstream.client.common import MessageExt
from rocketstream.client.namespace import unwrap
from rocketstream.client.process_queue import ProcessQueue
from rocketstream.client.rebalance import BROADCASTING, CLUSTERING

if TYPE_CHECKING:
    from rocketstream.client.config import PushConsumerConfig
    from rocketstream.client.rebalance import RebalanceImpl

__all__ = [
    "ConsumeConcurrentlyStatus",
    "ConsumeOrderlyStatus",
    "ConsumeConcurrentlyContext",
    "ConsumeOrderlyContext",
    "ConsumeMessageConcurrentlyService",
    "ConsumeMessageOrderlyService",
    "ConsumeRequest",
    "ConsumeThreadPool",
    "CONSUME_REQUEST_LATER_DELAY_S",
    "MAX_TIME_CONSUME_CONTINUOUSLY_S",
]

log = logging.getLogger("rocketstream.client")

CONSUME_REQUEST_LATER_DELAY_S = 5.0       # submitConsumeRequestLater (concurrent): 5 s
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


_CONSUME_SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS   # looked up once per listener call
_RECONSUME_LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER


class ConsumeOrderlyStatus(enum.Enum):
    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


@dataclass(slots=True)
class ConsumeConcurrentlyContext:
    """``ConsumeConcurrentlyContext``: ``delay_level_when_next_consume`` 0 lets the broker choose (3 +
    reconsume times), -1 sends straight to the DLQ; ``ack_index`` is the last consumed message on success."""

    message_queue: MessageQueue
    delay_level_when_next_consume: int = 0
    ack_index: int = 2**31 - 1


@dataclass(slots=True)
class ConsumeOrderlyContext:
    message_queue: MessageQueue
    auto_commit: bool = True
    suspend_current_queue_time_millis: int = -1


ConcurrentListener = Callable[[list[MessageExt], ConsumeConcurrentlyContext], Any]
OrderlyListener = Callable[[list[MessageExt], ConsumeOrderlyContext], Any]


class ConsumerHooks(Protocol):
    """What the consume services need of the push consumer."""

    group: str
    config: PushConsumerConfig
    loop: asyncio.AbstractEventLoop
    rebalance: RebalanceImpl

    def effective_max_reconsume_times(self, orderly: bool) -> int: ...
    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None: ...
    def send_message_back(self, msg: MessageExt, delay_level: int, broker_name: str | None) -> bool: ...
    def send_to_retry_topic(self, msg: MessageExt, reconsume_times: int) -> bool: ...


def reset_retry_topic(msgs: Sequence[MessageExt], group: str, namespace: str | None = None) -> None:
    """``resetRetryAndNamespace``: a message read from ``%RETRY%<group>`` shows its original topic; with a
    ``namespace``, every topic is shown without it."""
    retry = "%RETRY%" + group
    for msg in msgs:
        if msg.topic == retry:   # first: other messages' properties stay undecoded
            original = msg.properties.get(PROPERTY_RETRY_TOPIC)
            if original:
                msg.topic = original
        if namespace:
            msg.topic = unwrap(namespace, msg.topic)


def put_properties(msgs: Sequence[MessageExt], pairs: tuple[tuple[str, str], ...]) -> None:
    """``MessageAccessor.putProperty`` of ``pairs`` on every message (MessageExt: without decoding its
    properties; any other message object: its properties dict)."""
    for m in msgs:
        if m.__class__ is MessageExt:
            m.put_properties(pairs)
        else:
            m.properties.update(pairs)


def consume_directly(group: str, listener: Callable[[list[MessageExt], Any], Any], msg: MessageExt,
                     broker_name: str, orderly: bool, namespace: str | None = None) -> dict[str, object]:
    """``consumeMessageDirectly`` of both services (CONSUME_MESSAGE_DIRECTLY, client_remoting.py): the
    listener on one message outside any queue (no offset, no retry); ``ConsumeMessageDirectlyResult``."""
    mq = MessageQueue(msg.topic, broker_name, msg.queue_id)
    msgs = [msg]
    reset_retry_topic(msgs, group, namespace)
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


class _StatsCell:
    """One consume thread's counters: only that thread adds to them, so no lock is taken per listener call."""

    __slots__ = ("consumed_ok", "consumed_failed", "listener_errors", "sent_back", "send_back_failed")

    def __init__(self) -> None:
        self.consumed_ok = self.consumed_failed = self.listener_errors = self.sent_back = self.send_back_failed = 0


class ConsumeStats:
    """The consume service's counters (``ConsumerStatsManager``'s consume OK / failed counts and ours), summed
    over per-thread cells on read, as ``StatsItem`` counts with ``LongAdder``; ``active``: listener calls
    running per queue."""

    def __init__(self) -> None:
        self._cells: list[_StatsCell] = []
        self._local = threading.local()
        self._cells_lock = threading.Lock()
        self.active: dict[MessageQueue, int] = {}

    def cell(self) -> _StatsCell:
        """The calling thread's counters."""
        cell: _StatsCell | None = getattr(self._local, "cell", None)
        if cell is None:
            cell = self._local.cell = _StatsCell()
            with self._cells_lock:
                self._cells.append(cell)
        return cell

    def _sum(self, name: str) -> int:
        with self._cells_lock:
            cells = list(self._cells)
        return sum(getattr(c, name) for c in cells)

    @property
    def consumed_ok(self) -> int:
        return self._sum("consumed_ok")

    @property
    def consumed_failed(self) -> int:
        return self._sum("consumed_failed")

    @property
    def listener_errors(self) -> int:
        return self._sum("listener_errors")

    @property
    def sent_back(self) -> int:
        return self._sum("sent_back")

    @property
    def send_back_failed(self) -> int:
        return self._sum("send_back_failed")


_STOP: Callable[[], None] = lambda: None   # noqa: E731   # a consume thread that takes it ends


class ConsumeThreadPool:
    """``consumeExecutor``: up to ``max_threads`` threads (named ``<name><n>``, n from 1, as RocketMQ's
    ``ThreadFactoryImpl``) taking tasks off one queue in order. A thread is started when a task finds none
    idle, as ThreadPoolExecutor does; unlike it, no Future, work item or Python-level semaphore is made per task
    (their locks and conditions cost ~30 µs of CPU per handed-over task, about 1 µs per message of a 32-message
    pull: measured, tests/benchmarks/bench_client_cpu.py). A task's exception is logged with its traceback.
    The threads are daemons: a consumer never shut down does not keep the interpreter alive."""

    def __init__(self, max_threads: int, name: str) -> None:
        self.max_threads = max_threads
        self.name = name
        self._queue: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0            # threads done with a task and not yet handed another (under _lock)
        self._lock = threading.Lock()
        self._shutdown = False
        self.tasks = 0            # tasks submitted (under _lock)

    def submit(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on a consume thread; RuntimeError after :meth:`shutdown`."""
        start: threading.Thread | None = None
        with self._lock:
            if self._shutdown:
                raise RuntimeError(f"{self.name}: cannot submit after shutdown")
            self.tasks += 1
            if self._idle:
                self._idle -= 1   # that thread takes this task
            elif len(self._threads) < self.max_threads:
                start = threading.Thread(target=self._work, name=f"{self.name}{len(self._threads) + 1}",
                                         daemon=True)
                self._threads.append(start)
        self._queue.put(fn)
        if start is not None:
            start.start()

    def _work(self) -> None:
        take, lock = self._queue.get, self._lock
        while True:
            fn = take()
            if fn is _STOP:
                return
            try:
                fn()
            except Exception:   # a bug of ours: the consume thread goes on with the next task
                log.exception("%s: consume task failed", self.name)
            del fn
            with lock:
                self._idle += 1

    def shutdown(self, wait: bool = False) -> None:
        """Tasks not started are dropped (``cancel_futures``); the threads end after their running task;
        ``wait``: until they have (not the calling thread itself)."""
        with self._lock:
            self._shutdown = True
            threads = list(self._threads)
        try:
            while True:
                self._queue.get_nowait()
        except queue.Empty:
            pass
        for _ in threads:
            self._queue.put(_STOP)
        if wait:
            me = threading.current_thread()
            for t in threads:
                if t is not me:
                    t.join()


class _ServiceBase:
    def __init__(self, consumer: ConsumerHooks, consume_thread_max: int, name: str, namespace: str | None) -> None:
        self.consumer = consumer
        self.namespace = namespace   # the consumer's (ClientConfig.namespace): delivered topics are shown without it
        self.executor = ConsumeThreadPool(consume_thread_max, name)
        self.stopped = False
        self.stats = ConsumeStats()
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
        self.executor.shutdown(wait=await_terminate_s > 0)


class ConsumeMessageConcurrentlyService(_ServiceBase):
    def __init__(self, consumer: ConsumerHooks, listener: ConcurrentListener, consume_thread_max: int, *,
                 namespace: str | None = None) -> None:
        super().__init__(consumer, consume_thread_max, "ConsumeMessageThread_", namespace)
        self.listener = listener

    def consume_message_directly(self, msg: MessageExt, broker_name: str) -> dict[str, object]:
        return consume_directly(self.consumer.group, self.listener, msg, broker_name, orderly=False,
                                namespace=self.namespace)

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
        period_s = self.consumer.config.consume_timeout_minutes * 60
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
        """``submitConsumeRequest``: one :class:`ConsumeRequest` per ``consume_message_batch_max_size`` messages.
        The ConsumeRequests of one pulled batch run one after the other in one consume-thread task and the
        messages they finished leave the ProcessQueue together (one ``removeMessage`` and offset update): Java
        submits one task per ConsumeRequest, which in Python costs more thread hand-offs than a no-op listener
        costs. With many pulled batches waiting (the usual backlog) every consume thread is still busy."""
        batch = list(msgs)
        if batch:
            self._submit(lambda: self._run_requests(batch, pq, mq))

    def _run_requests(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        """A consume-thread task: :meth:`ConsumeRequest.run` of each piece of the pulled batch, then the finished
        messages out of the ProcessQueue and its answer to the offset store; nothing when the queue was dropped
        meanwhile.

        The pieces are run inline: a listener call answered CONSUME_SUCCESS for all of its piece (the usual
        case) is counted without building a ConsumeRequest; any other answer goes through
        :meth:`ConsumeRequest.finish` (``processConsumeResult``) exactly as a lone request would. The
        CONSUME_START_TIME value is formatted once per millisecond instead of once per call."""
        size = max(1, self.consumer.config.consume_message_batch_max_size)
        reset_retry_topic(msgs, self.consumer.group, self.namespace)   # ConsumeRequest.run's, for all at once
        self._enter(mq)
        try:
            finished = self._run_singles(msgs, pq, mq) if size == 1 else self._run_pieces(msgs, pq, mq, size)
        finally:
            self._leave(mq)
        if finished is not None and not pq.dropped:
            offset = pq.remove_messages(finished)
            if offset >= 0 and not pq.dropped:
                self.consumer.update_offset(mq, offset, True)

    def _run_pieces(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue,
                    size: int) -> list[MessageExt] | None:
        """:meth:`_run_requests`' listener calls on pieces of ``size`` messages: the messages to remove from
        the ProcessQueue, None when the queue was dropped or the service stopped (nothing to commit)."""
        listener = self.listener
        context_of = ConsumeConcurrentlyContext
        message_ext = MessageExt
        stamp_ms = -1
        stamp: tuple[tuple[str, str], ...] = ()
        ok = 0
        finished: list[MessageExt] | None = None   # None while every piece so far was consumed whole
        n = len(msgs)
        try:
            for i in range(0, n, size):
                if pq.dropped or self.stopped:
                    return None
                piece = msgs[i:i + size]   # the listener's own list: what it does to it changes nothing here
                count = len(piece)
                now_ms = int(time.time() * 1000)
                if now_ms != stamp_ms:
                    stamp_ms = now_ms
                    stamp = ((PROPERTY_CONSUME_START_TIME, str(now_ms)),)
                for m in piece:   # put_properties, inline
                    if m.__class__ is message_ext:
                        m.put_properties(stamp)
                    else:
                        m.properties.update(stamp)
                context = context_of(mq)
                answer: object = None
                try:
                    answer = listener(piece, context)
                except Exception:
                    self.listener_raised(msgs[i:i + size], mq)
                if answer is _CONSUME_SUCCESS and context.ack_index >= count - 1 and not pq.dropped:
                    ok += count
                    if finished is not None:
                        finished += msgs[i:i + size]
                    continue
                done = ConsumeRequest(msgs[i:i + size], pq, mq).finish(self, answer, context)
                if done is None:
                    return None
                if finished is None:
                    finished = msgs[:i]
                finished += done
        finally:
            if ok:
                self.stats.cell().consumed_ok += ok
        return msgs if finished is None else finished

    def _run_singles(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> list[MessageExt] | None:
        """:meth:`_run_pieces` for pieces of one message (consumeMessageBatchMaxSize 1, the default), with less
        work per call: the listener gets ``[m]``; the answer is judged as there.
        CONSUME_START_TIME is put as :meth:`MessageExt.put_properties` puts it (inline: a MessageExt whose
        properties are still encoded gets a pending tuple, shared by the messages that shared the one before)."""
        listener = self.listener
        context_of = ConsumeConcurrentlyContext
        message_ext = MessageExt
        clock = time.time
        success = _CONSUME_SUCCESS
        stamp_ms = -1
        stamp: tuple[tuple[str, str], ...] = ()
        last_pending: object = None
        stamped: tuple[tuple[str, str], ...] = ()
        ok = 0
        finished: list[MessageExt] | None = None   # None while every message so far was consumed
        try:
            for i, m in enumerate(msgs):
                if pq.dropped or self.stopped:
                    return None
                now_ms = int(clock() * 1000)
                if now_ms != stamp_ms:
                    stamp_ms = now_ms
                    stamp = ((PROPERTY_CONSUME_START_TIME, str(now_ms)),)
                    last_pending = None
                if m.__class__ is not message_ext:
                    m.properties.update(stamp)
                elif m._props is not None:
                    m._props.update(stamp)
                else:
                    pending = m._pending
                    if pending is None:
                        m._pending = stamp
                    else:
                        if pending is not last_pending:
                            last_pending = pending
                            stamped = pending + stamp
                        m._pending = stamped
                context = context_of(mq)
                answer: object = None
                try:
                    answer = listener([m], context)
                except Exception:
                    self.listener_raised([m], mq)
                if answer is success and context.ack_index >= 0 and not pq.dropped:
                    ok += 1
                    if finished is not None:
                        finished.append(m)
                    continue
                done = ConsumeRequest([m], pq, mq).finish(self, answer, context)
                if done is None:
                    return None
                if finished is None:
                    finished = msgs[:i]
                finished += done
        finally:
            if ok:
                self.stats.cell().consumed_ok += ok
        return msgs if finished is None else finished

    def listener_raised(self, msgs: list[MessageExt], mq: MessageQueue) -> None:
        """In the ``except`` block around the listener: logged with the traceback and counted; the messages are
        a retry."""
        self.stats.cell().listener_errors += 1
        log.exception("%s: listener raised on %d messages of %s; they will be consumed again",
                      self.consumer.group, len(msgs), mq)

    def process_consume_result(self, status: ConsumeConcurrentlyStatus, context: ConsumeConcurrentlyContext,
                               request: ConsumeRequest) -> list[MessageExt]:
        """``processConsumeResult``: messages up to ``ack_index`` (all for CONSUME_SUCCESS, none for
        RECONSUME_LATER) count as consumed; the rest go back to the broker in CLUSTERING (``sendMessageBack``
        with the context's delay level) or are dropped with a warning in BROADCASTING. A message whose
        send-back failed stays in the ProcessQueue and is consumed again 5 s later
        (``submitConsumeRequestLater``). Returns the messages to remove from the ProcessQueue."""
        msgs = request.msgs
        n = len(msgs)
        cell = self.stats.cell()
        if status is _CONSUME_SUCCESS:
            if context.ack_index >= n - 1:
                cell.consumed_ok += n
                return msgs
            ack_index = context.ack_index
        else:
            ack_index = -1
        cell.consumed_ok += ack_index + 1
        cell.consumed_failed += n - ack_index - 1
        pq, mq = request.process_queue, request.message_queue
        if self.consumer.config.message_model == BROADCASTING:
            for msg in msgs[ack_index + 1:]:
                log.warning("%s: BROADCASTING consumption failed, message dropped: %s", self.consumer.group,
                            msg.msg_id)
            return msgs
        failed: list[MessageExt] = []
        for msg in msgs[ack_index + 1:]:
            if self.consumer.send_message_back(msg, context.delay_level_when_next_consume, mq.broker_name):
                cell.sent_back += 1
            else:
                cell.send_back_failed += 1
                msg.reconsume_times += 1
                failed.append(msg)
        if not failed:
            return msgs
        failed_ids = {id(m) for m in failed}
        self._later(CONSUME_REQUEST_LATER_DELAY_S, lambda: self.submit_consume_request(failed, pq, mq, True))
        return [m for m in msgs if id(m) not in failed_ids]


@dataclass(slots=True)
class ConsumeRequest:
    """``ConsumeMessageConcurrentlyService.ConsumeRequest``: one listener call on up to
    ``consume_message_batch_max_size`` messages of one queue."""

    msgs: list[MessageExt]
    process_queue: ProcessQueue
    message_queue: MessageQueue

    def run(self, service: ConsumeMessageConcurrentlyService) -> list[MessageExt] | None:
        """``run``: the listener (``CONSUME_START_TIME`` set; ``resetRetryAndNamespace`` was done for the whole
        pulled batch), its answer — an exception or anything but a ConsumeConcurrentlyStatus is RECONSUME_LATER —
        to :meth:`ConsumeMessageConcurrentlyService.process_consume_result`. The messages to remove from the
        ProcessQueue; None (nothing committed) when the queue was dropped or the service stopped."""
        pq, mq = self.process_queue, self.message_queue
        if pq.dropped or service.stopped:
            return None
        put_properties(self.msgs, ((PROPERTY_CONSUME_START_TIME, str(int(time.time() * 1000))),))
        context = ConsumeConcurrentlyContext(mq)
        answer: object = None
        try:
            answer = service.listener(list(self.msgs), context)
        except Exception:
            service.listener_raised(self.msgs, mq)
        return self.finish(service, answer, context)

    def finish(self, service: ConsumeMessageConcurrentlyService, answer: object,
               context: ConsumeConcurrentlyContext) -> list[MessageExt] | None:
        """What :meth:`run` does with the listener's ``answer``: anything but a ConsumeConcurrentlyStatus is
        RECONSUME_LATER (None and exceptions silently); None when the queue was dropped meanwhile, else
        :meth:`ConsumeMessageConcurrentlyService.process_consume_result`."""
        pq, mq = self.process_queue, self.message_queue
        status = _CONSUME_SUCCESS
        if answer is not status:
            if answer is not None and answer is not _RECONSUME_LATER:
                log.warning("%s: listener returned %r (not a ConsumeConcurrentlyStatus): RECONSUME_LATER",
                            service.consumer.group, answer)
            status = _RECONSUME_LATER
        if pq.dropped:
            log.warning("%s: %s dropped while consuming %d messages; not committed", service.consumer.group, mq,
                        len(self.msgs))
            return None
        return service.process_consume_result(status, context, self)


class ConsumeMessageOrderlyService(_ServiceBase):
    def __init__(self, consumer: ConsumerHooks, listener: OrderlyListener, consume_thread_max: int, *,
                 lock_interval_s: float, namespace: str | None = None) -> None:
        super().__init__(consumer, consume_thread_max, "ConsumeMessageThread_", namespace)
        self.listener = listener
        self.lock_interval_s = lock_interval_s
        self._mq_locks: dict[MessageQueue, threading.Lock] = {}   # MessageQueueLock
        self._mq_locks_guard = threading.Lock()
        self._lock_task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """CLUSTERING: renew the broker locks every ``lock_interval_s`` (20 s), first after 1 s (call on
        the loop)."""
        if self.consumer.config.message_model == CLUSTERING:
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
        return consume_directly(self.consumer.group, self.listener, msg, broker_name, orderly=True,
                                namespace=self.namespace)

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
        clustering = self.consumer.config.message_model == CLUSTERING
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
                msgs = pq.take_messages(max(1, self.consumer.config.consume_message_batch_max_size))
                if not msgs:
                    return
                typed: list[MessageExt] = msgs   # type: ignore[assignment]
                reset_retry_topic(typed, self.consumer.group, self.namespace)
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
                        self.stats.cell().listener_errors += 1
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
            self.stats.cell().consumed_ok += len(msgs)
            commit_offset = pq.commit()
        elif self._check_reconsume_times(msgs):
            self.stats.cell().consumed_failed += len(msgs)
            pq.make_message_to_consume_again(msgs)
            delay_ms = context.suspend_current_queue_time_millis
            if delay_ms < 0:
                delay_ms = self.consumer.config.suspend_current_queue_time_millis
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
                    self.stats.cell().sent_back += 1
                else:
                    suspend = True
                    msg.reconsume_times += 1
            else:
                suspend = True
                msg.reconsume_times += 1
        return suspend
