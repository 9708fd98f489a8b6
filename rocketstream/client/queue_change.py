"""``TopicMessageQueueChangeListener`` for the lite-pull consumer (``DefaultLitePullConsumerImpl``
``registerTopicMessageQueueChangeListener`` / ``fetchTopicMessageQueuesAndCompare``, 4.9.8).

Every ``topicMetadataCheckIntervalMillis`` (30 s; the first check 10 s after start) the readable queues of
each topic with a listener are fetched from the name server and compared with the set seen last; a
different set is stored and the listener is called with ``(topic, queues)`` (in a worker thread, so a slow
listener does not hold the client's loop). The set seen at registration (or at start) is the baseline: the
listener hears about changes only. A listener that raises is logged; a route that cannot be fetched ends
that check (logged) and the next one tries again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from rocketstream.client.allocate import MessageQueue
from rocketstream.errors import MQClientError, RemotingError

__all__ = ["TopicQueueWatcher", "TopicMessageQueueChangeListener", "TOPIC_METADATA_CHECK_INTERVAL_S",
           "FIRST_CHECK_DELAY_S"]

log = logging.getLogger("rocketstream.client")

TOPIC_METADATA_CHECK_INTERVAL_S = 30.0   # DefaultLitePullConsumer.topicMetadataCheckIntervalMillis
FIRST_CHECK_DELAY_S = 10.0               # startScheduleTask: initial delay 1000 * 10 ms

TopicMessageQueueChangeListener = Callable[[str, set[MessageQueue]], object]


class TopicQueueWatcher:
    """The listeners by topic and the queue sets last seen (``topicMessageQueueChangeListenerMap``,
    ``messageQueuesForTopic``); ``fetch(topic)`` reads a topic's queues from the name server."""

    def __init__(self, group: str, fetch: Callable[[str], Awaitable[set[MessageQueue]]]) -> None:
        self.group = group
        self.fetch = fetch
        self.listeners: dict[str, TopicMessageQueueChangeListener] = {}
        self.queues: dict[str, set[MessageQueue]] = {}
        self._check_lock = asyncio.Lock()

    def register(self, topic: str, listener: TopicMessageQueueChangeListener) -> None:
        if topic in self.listeners:
            log.warning("%s: Topic %s had been registered, new listener will overwrite the old one", self.group, topic)
        self.listeners[topic] = listener

    async def prime(self, topic: str) -> None:
        """The baseline of ``topic`` (registration while running, or start)."""
        self.queues[topic] = set(await self.fetch(topic))

    async def check(self) -> list[str]:
        """``fetchTopicMessageQueuesAndCompare``: the topics whose listener was called."""
        changed: list[str] = []
        async with self._check_lock:
            for topic, listener in list(self.listeners.items()):
                new = set(await self.fetch(topic))
                old = self.queues.get(topic)
                if old is not None and old == new and new:
                    continue   # isSetEqual: equal and not empty
                self.queues[topic] = new
                changed.append(topic)
                try:
                    await asyncio.to_thread(listener, topic, set(new))
                except Exception:   # the user's listener: logged, the watch goes on
                    log.exception("%s: TopicMessageQueueChangeListener of %s raised", self.group, topic)
        return changed

    async def run(self, first_delay_s: float, interval_s: Callable[[], float]) -> None:
        await asyncio.sleep(first_delay_s)
        while True:
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except (RemotingError, MQClientError) as exc:
                log.error("%s: ScheduledTask fetchMessageQueuesAndCompare exception: %s", self.group, exc)
            await asyncio.sleep(interval_s())
