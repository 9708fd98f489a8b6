"""``PullRequest`` and ``PullMessageService`` (seeds 001/003; ``PullMessageService.java`` 4.9.8).

A :class:`PullRequest` is one queue's pull cursor (group, MessageQueue, ProcessQueue, next offset). The
:class:`PullMessageService` takes requests off its queue and hands each to the consumer's ``pull_message``
(``DefaultMQPushConsumerImpl.pullMessage``), which pulls asynchronously and puts the request back: at once after
a pull, :data:`PULL_TIME_DELAY_WHEN_FLOW_CONTROL_S` (50 ms) later when the ProcessQueue is over a threshold,
:data:`PULL_TIME_DELAY_WHEN_EXCEPTION_S` (3 s) later after an error. Everything here runs on the client
instance's event loop.

:func:`flow_control` is the pull-side decision of ``pullMessage`` (seed 003): the queue holds more than
``pull_threshold_for_queue`` messages, or more than ``pull_threshold_size_for_queue`` MiB, or (concurrent
consumption only) its offsets span more than ``consume_concurrently_max_span``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from rocketstream.client.allocate import MessageQueue
from rocketstream.client.process_queue import ProcessQueue

__all__ = [
    "PullRequest",
    "PullMessageService",
    "flow_control",
    "PULL_TIME_DELAY_WHEN_FLOW_CONTROL_S",
    "PULL_TIME_DELAY_WHEN_EXCEPTION_S",
    "PULL_TIME_DELAY_WHEN_SUSPEND_S",
    "PULL_TIME_DELAY_WHEN_BROKER_FLOW_CONTROL_S",
    "BROKER_SUSPEND_MAX_TIME_MS",
    "CONSUMER_TIMEOUT_WHEN_SUSPEND_S",
]

log = logging.getLogger("rocketstream.client")

PULL_TIME_DELAY_WHEN_FLOW_CONTROL_S = 0.050   # DefaultMQPushConsumerImpl.PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL
PULL_TIME_DELAY_WHEN_EXCEPTION_S = 3.0        # pullTimeDelayMillsWhenException
PULL_TIME_DELAY_WHEN_SUSPEND_S = 1.0          # PULL_TIME_DELAY_MILLS_WHEN_SUSPEND (paused consumer)
PULL_TIME_DELAY_WHEN_BROKER_FLOW_CONTROL_S = 0.020   # response code 215 FLOW_CONTROL
BROKER_SUSPEND_MAX_TIME_MS = 15_000           # BROKER_SUSPEND_MAX_TIME_MILLIS (long-polling hold)
CONSUMER_TIMEOUT_WHEN_SUSPEND_S = 30.0        # CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND
MIB = 1024 * 1024


@dataclass(eq=False)
class PullRequest:
    """``PullRequest``: where the next pull of one queue starts; ``locked_first`` is set by orderly
    consumption once the start offset was computed under the broker lock."""

    consumer_group: str
    message_queue: MessageQueue
    process_queue: ProcessQueue
    next_offset: int
    locked_first: bool = False
    previously_locked: bool = field(default=False, repr=False)
    # PullMessageService's: the request's pull task is running ``pull`` / was asked to pull again after it
    pulling: bool = field(default=False, repr=False, compare=False)
    again: bool = field(default=False, repr=False, compare=False)
    # the push consumer's pull of the next batch, sent before this one was decoded (PushConsumer._pull_ahead)
    ahead: Any = field(default=None, repr=False, compare=False)


def flow_control(pq: ProcessQueue, *, pull_threshold_for_queue: int, pull_threshold_size_for_queue_mib: int,
                 consume_concurrently_max_span: int, orderly: bool,
                 incoming: tuple[int, int, int, int] | None = None) -> str | None:
    """Why the next pull of ``pq`` must wait (``"count"``, ``"size"``, ``"span"``), or None to pull now.
    ``incoming``: (messages, bytes, first offset, last offset) of a pulled batch not in ``pq`` yet, counted as if
    it were (a pull sent before that batch is queued)."""
    count, size = pq.msg_count, pq.msg_size
    if incoming is not None:
        count, size = count + incoming[0], size + incoming[1]
    if count > pull_threshold_for_queue:
        return "count"
    if size // MIB > pull_threshold_size_for_queue_mib:
        return "size"
    if not orderly:
        if incoming is None:
            span = pq.max_span()
        else:   # the batch comes after every waiting message: its last offset is the highest
            waiting = pq.first_offset()
            span = incoming[3] - (incoming[2] if waiting is None else min(waiting, incoming[2]))
        if span > consume_concurrently_max_span:
            return "span"
    return None


class PullMessageService:
    """The pull requests of one consumer on the event loop; ``pull`` is called once per request executed.

    ``pull`` is a coroutine (the consumer's ``pull_message``); each request runs as its own task, started in
    the order the requests were given (the loop runs new tasks first in, first out), so that one slow
    long-poll does not hold up other queues (RocketMQ pulls asynchronously from one thread, taking requests
    off ``pullRequestQueue`` in order). The task is created by :meth:`execute_pull_request_immediately`
    itself: a queue and a taking task in between would only add a hop per pull. A request put back at once by
    its own ``pull`` (the usual end of a pull that found messages) is pulled again by the same task when
    ``pull`` returns, without a task per pull; the order of the requests' pulls is the same.
    """

    def __init__(self, pull: Callable[[PullRequest], Awaitable[None]], name: str = "PullMessageService") -> None:
        self._pull = pull
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inflight: set[asyncio.Task[None]] = set()
        self._tracked: set[asyncio.Task[Any]] = set()   # pulls sent ahead (track)
        self._timers: set[asyncio.TimerHandle] = set()
        self.stopped = False

    def start(self) -> None:
        """Start on the running loop (call from the loop); requests given before are ignored."""
        self._loop = asyncio.get_running_loop()

    async def _pull_one(self, request: PullRequest) -> None:
        pull = self._pull
        try:
            while True:
                request.pulling = True
                try:
                    await pull(request)
                finally:
                    request.pulling = False
                if not request.again or self.stopped:
                    return
                request.again = False
        except asyncio.CancelledError:
            raise
        except Exception:   # never lose the request: log and retry later, as the Java service does
            request.again = False
            log.exception("%s: pull of %s failed", self.name, request.message_queue)
            self.execute_pull_request_later(request, PULL_TIME_DELAY_WHEN_EXCEPTION_S)

    def execute_pull_request_immediately(self, request: PullRequest) -> None:
        """``executePullRequestImmediately`` (call from the loop): the pull starts in a task of its own, or,
        asked while the request's task runs ``pull``, in that task once ``pull`` returns."""
        if request.pulling:
            request.again = not self.stopped
            return
        loop = self._loop
        if loop is not None and not self.stopped:
            task = loop.create_task(self._pull_one(request))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)

    def execute_pull_request_later(self, request: PullRequest, delay_s: float) -> None:
        """``executePullRequestLater``: back on the queue after ``delay_s`` (call from the loop)."""
        if self.stopped:
            return
        self.execute_task_later(lambda: self.execute_pull_request_immediately(request), delay_s)

    def execute_task_later(self, fn: Callable[[], object], delay_s: float) -> None:
        """``executeTaskLater``: run ``fn`` on the loop after ``delay_s``."""
        if self.stopped:
            return
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            if handle is not None:
                self._timers.discard(handle)
            if not self.stopped:
                fn()

        handle = loop.call_later(delay_s, fire)
        self._timers.add(handle)

    def track(self, task: asyncio.Task[Any]) -> None:
        """A task of the consumer's (a pull sent ahead) that :meth:`stop` cancels if it is still running."""
        self._tracked.add(task)
        task.add_done_callback(self._tracked.discard)

    def pending(self) -> int:
        """Pull requests started and not finished (each waits for its answer or runs ``pull``)."""
        return len(self._inflight)

    async def stop(self) -> None:
        self.stopped = True
        for h in list(self._timers):
            h.cancel()
        self._timers.clear()
        tasks = [*self._inflight, *self._tracked]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
