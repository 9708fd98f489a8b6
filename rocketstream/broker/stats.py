"""Broker statistics for the admin answers: message counts and rates (``BrokerStatsManager``,
``BrokerStats``, ``StoreStatsService`` in RocketMQ 4.9.8).

``GET_BROKER_RUNTIME_INFO`` (28) reports ``msgPutTotalTodayNow``/``msgGetTotalTodayNow`` (messages put /
handed out by pulls since boot), ``putTps``/``getTransferedTps`` (three rates over 10 s, 60 s and 600 s,
space-separated, as ``StoreStatsService.getPutTps`` writes them); ``GET_CONSUME_STATS`` (208) reports a
group's ``consumeTps`` on a topic (``BrokerStatsManager.tpsGroupGetNums``: messages pulled per second
over the last minute). The send and pull processors feed them: ``on_put(topic, count, size)`` after a
successful put, ``on_get(group, topic, count)`` when a pull hands out messages.

Rates come from per-second buckets kept for the last 600 s; adding is O(1), a rate sums at most 600
buckets.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

__all__ = ["BrokerStats", "RateCounter", "TPS_WINDOWS_S", "GROUP_TPS_WINDOW_S"]

TPS_WINDOWS_S = (10, 60, 600)   # StoreStatsService.getPutTps(): 10 s, 1 min, 10 min
GROUP_TPS_WINDOW_S = 60         # BrokerStatsManager.tpsGroupGetNums: StatsItem.getStatsDataInMinute().getTps()


class RateCounter:
    """A running total plus per-second buckets for the last ``keep_s`` seconds."""

    __slots__ = ("total", "_buckets", "_keep_s", "_clock")

    def __init__(self, keep_s: int = max(TPS_WINDOWS_S), clock: Callable[[], float] = time.monotonic) -> None:
        self.total = 0
        self._buckets: deque[list[int]] = deque()   # [second, count], oldest first
        self._keep_s = keep_s
        self._clock = clock

    def add(self, n: int) -> None:
        self.total += n
        sec = int(self._clock())
        if self._buckets and self._buckets[-1][0] == sec:
            self._buckets[-1][1] += n
        else:
            self._buckets.append([sec, n])
            while self._buckets and self._buckets[0][0] <= sec - self._keep_s:
                self._buckets.popleft()

    def tps(self, window_s: int) -> float:
        """Messages per second over the last ``window_s`` whole seconds (the current second excluded,
        as it is still filling)."""
        now = int(self._clock())
        lo = now - window_s
        count = sum(c for s, c in self._buckets if lo <= s < now)
        return count / window_s


class BrokerStats:
    """Counters since boot; ``boot_ms`` is the broker's boot time (``bootTimestamp``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.boot_ms = time.time_ns() // 1_000_000
        self._clock = clock
        self.put = RateCounter(clock=clock)
        self.get = RateCounter(clock=clock)
        self.put_bytes = 0
        self.put_times = 0          # putMessageTimesTotal: put calls (a batch counts once)
        self.put_failed_times = 0   # putMessageFailedTimes
        self._group_get: dict[tuple[str, str], RateCounter] = {}

    def on_put(self, topic: str, count: int, size: int) -> None:
        self.put.add(count)
        self.put_bytes += size
        self.put_times += 1

    def on_put_failed(self, topic: str) -> None:
        self.put_failed_times += 1

    def on_get(self, group: str, topic: str, count: int) -> None:
        self.get.add(count)
        counter = self._group_get.get((group, topic))
        if counter is None:
            counter = self._group_get[(group, topic)] = RateCounter(GROUP_TPS_WINDOW_S, self._clock)
        counter.add(count)

    def group_get_tps(self, group: str, topic: str) -> float:
        counter = self._group_get.get((group, topic))
        return counter.tps(GROUP_TPS_WINDOW_S) if counter is not None else 0.0

    @staticmethod
    def tps_triple(counter: RateCounter) -> str:
        """``"<10 s> <60 s> <600 s>"`` as ``StoreStatsService.getPutTps()`` writes it (Java doubles)."""
        return " ".join(_java_double(counter.tps(w)) for w in TPS_WINDOWS_S)


def _java_double(x: float) -> str:
    """``String.valueOf(double)`` for our rates: the smallest non-zero one is 1/600 (> 1e-3), so Python's
    ``repr`` writes the same digits Java does (no exponent form occurs)."""
    return repr(float(x))
