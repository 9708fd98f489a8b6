"""``PullRequestHoldService``: pulls held for long polling (pull.py parks them here), by (topic, queueId).

Each held pull has its own timer for its hold time (``suspendTimeoutMillis``, or ``shortPollingTimeMills``
without long polling); a put wakes the pulls of its queue at once through :meth:`notify_message_arriving`
(the store's put listener, via the controller), so nothing polls. A woken or expired pull is handed to
``wakeup`` (pull.py's ``executeRequestWhenWakeup``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import numpy as np

from rocketstream.remoting.channel import Channel
from rocketstream.remoting.command import RemotingCommand

__all__ = ["PullRequest", "PullRequestHoldService"]


@dataclass(eq=False)
class PullRequest:
    """A held pull (``PullRequest``): the request, its connection, where it waits and until when."""

    channel: Channel
    request: RemotingCommand
    topic: str
    queue_id: int
    offset: int
    codes: Collection[int] | None      # tags codes of the filter; None = all
    deadline: float                    # time.monotonic()
    timer: asyncio.TimerHandle | None = field(default=None, repr=False)


class PullRequestHoldService:
    """Held pulls by (topic, queueId) (``PullRequestHoldService`` / ``ManyPullRequest``). Each has its own
    timer for the hold time; puts wake them through :meth:`notify_message_arriving`."""

    def __init__(self, read_units: Callable[[str, int, int, int], np.ndarray],
                 wakeup: Callable[[PullRequest], None]) -> None:
        self._read_units = read_units    # consume-queue units [start, end) of (topic, queue_id)
        self._wakeup = wakeup            # re-run a held pull without suspension and answer it
        self.held: dict[tuple[str, int], list[PullRequest]] = {}

    def suspend(self, req: PullRequest) -> None:
        """``suspendPullRequest``."""
        self.held.setdefault((req.topic, req.queue_id), []).append(req)
        loop = asyncio.get_running_loop()
        req.timer = loop.call_at(loop.time() + max(0.0, req.deadline - time.monotonic()), self._expire, req)

    def count(self) -> int:
        return sum(len(v) for v in self.held.values())

    def notify_message_arriving(self, topic: str, queue_id: int, max_offset: int) -> None:
        """``notifyMessageArriving``: re-run the held pulls of (topic, queueId) that wait below
        ``max_offset``; one whose filter matches nothing new stays held until its hold time ends."""
        waiting = self.held.get((topic, queue_id))
        if not waiting:
            return
        keep: list[PullRequest] = []
        for req in waiting:
            if req.channel.closed:
                self._cancel(req)
                continue
            if max_offset <= req.offset or not self._matches(req, max_offset):
                keep.append(req)
                continue
            self._cancel(req)
            self._execute(req)
        if keep:
            self.held[(topic, queue_id)] = keep
        else:
            self.held.pop((topic, queue_id), None)

    def _matches(self, req: PullRequest, max_offset: int) -> bool:
        """Whether a unit in [req.offset, max_offset) passes the request's tags-code filter
        (``isMatchedByConsumeQueue`` on the arriving message)."""
        if req.codes is None:
            return True
        units = self._read_units(req.topic, req.queue_id, req.offset, max_offset)
        codes = req.codes
        for raw in units["tags_code"].tolist():
            code = raw & 0xFFFFFFFF
            if (code - (1 << 32) if code >= 1 << 31 else code) in codes:
                return True
        return False

    def _cancel(self, req: PullRequest) -> None:
        if req.timer is not None:
            req.timer.cancel()
            req.timer = None

    def _expire(self, req: PullRequest) -> None:
        """The hold time is over: answer with whatever the queue holds now."""
        req.timer = None
        key = (req.topic, req.queue_id)
        waiting = self.held.get(key)
        if waiting is None or req not in waiting:
            return
        waiting.remove(req)
        if not waiting:
            self.held.pop(key, None)
        if not req.channel.closed:
            self._execute(req)

    def _execute(self, req: PullRequest) -> None:
        self._wakeup(req)

    def stop(self) -> None:
        for waiting in self.held.values():
            for req in waiting:
                self._cancel(req)
        self.held.clear()
