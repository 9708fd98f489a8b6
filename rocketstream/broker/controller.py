"""``BrokerController``: the broker's store, remoting server, processors and background services in one
asyncio loop (RocketMQ's ``BrokerController``: ``initialize`` / ``start`` / ``shutdown``).

Start: bind the server (``brokerIP1:listenPort``), open the store for writing (its store host is that
address: it is in every record and offsetMsgId), load topics, offsets and subscription groups, register
the processors, start the services, register with every name server (REGISTER_BROKER with the
``TopicConfigSerializeWrapper`` body); ``start`` returns only then (rocketstream/serve.py logs the ready
line). Services: store flush in a thread of its own (flush.py: every ``flushIntervalCommitLog``, and
SYNC_FLUSH group commits), consumer-offset persist every 5 s (``flushConsumerOffsetInterval``),
registration every 30 s (``registerNameServerPeriod``) and at once when a topic is created, client
housekeeping (client_manager.py). Stop: UNREGISTER_BROKER, answer
nothing more, persist offsets and groups, close the store (no ``abort`` left).

All store calls run on the loop's thread, except the flush thread's fdatasync (flush.py). How
in-process code puts messages so that held pulls wake: through ``controller.store.put_message`` /
``put_messages`` (or ``put_batch``) — the store calls its ``put_listeners`` after every put with the
queue's new max offset, and the controller's listener (:meth:`on_put`) wakes the PullRequestHoldService
for that queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import zlib
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import replace
from typing import Any

from rocketstream.broker import acl, admin, client_manager, locks, pull, queries, send, send_back, transaction
from rocketstream.broker.config import REGISTER_BROKER_TIMEOUT_S, BrokerConfig
from rocketstream.broker.consumer_manager import ConsumerManager, ProducerManager
from rocketstream.broker.flush import FlushService
from rocketstream.broker.hold import PullRequestHoldService
from rocketstream.broker.offset_manager import BrokerOffsetManager
from rocketstream.broker.rebalance_lock import RebalanceLockManager
from rocketstream.broker.schedule import ScheduleMessageService
from rocketstream.broker.stats import BrokerStats
from rocketstream.broker.subscription_group import SubscriptionGroupManager
from rocketstream.broker.topic_manager import TopicConfigManager
from rocketstream.errors import RemotingError, RocketStreamError
from rocketstream.remoting import json_body
from rocketstream.remoting.channel import Channel
from rocketstream.remoting.client import connect
from rocketstream.remoting.codes import RequestCode, ResponseCode
from rocketstream.remoting.command import RemotingCommand
from rocketstream.remoting.server import RemotingServer, RequestHook
from rocketstream.store.message_store import MessageStore
from rocketstream.store.write.messages import Message, PutMessageResult

__all__ = ["BrokerController"]

log = logging.getLogger("rocketstream.broker")

BROKER_VERSION_DESC = "V4_9_8"


class BrokerController:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.server = RemotingServer(config.broker_ip1, config.listen_port, name="broker",
                                     limits=config.server_limits(), tls=config.tls_server)
        # the broker's own client side (registration with name servers): tls.enable + tls.client.*
        self._ns_ssl = config.tls_client.ssl_context() if config.tls_client is not None else None
        self.request_hooks: list[RequestHook] = self.server.request_hooks
        self.store: MessageStore = None  # type: ignore[assignment]   # opened by start()
        self.topics: TopicConfigManager = None  # type: ignore[assignment]
        self.offsets: BrokerOffsetManager = None  # type: ignore[assignment]
        self.subscription_groups: SubscriptionGroupManager = None  # type: ignore[assignment]
        self.stats = BrokerStats()
        self.consumers = ConsumerManager(config, lambda: self.subscription_groups, self.spawn)
        self.producers = ProducerManager()
        self.locks = RebalanceLockManager()
        self.pull_holds = PullRequestHoldService(
            lambda topic, queue_id, start, end: self.store.peek_cq_units(topic, queue_id, start, end),
            lambda req: pull.execute_when_wakeup(self, req))
        self.schedule: ScheduleMessageService | None = None   # made by _wire_modules at start
        self.transactions: transaction.TransactionalMessageCheckService | None = None   # likewise
        self.boot_timestamp = int(time.time() * 1000)
        self._services: list[tuple[Callable[[], Awaitable[None]], str]] = []
        self._service_tasks: list[asyncio.Task] = []
        self._tasks: set[asyncio.Task] = set()
        self._ns_channels: dict[str, Channel] = {}
        self._register_lock = asyncio.Lock()
        self._running = False
        self.flusher: FlushService | None = None   # made by start() once the store is open

    # --- helpers other modules use -----------------------------------------------------------------
    @property
    def broker_addr(self) -> str:
        return self.config.broker_addr

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task:
        """A fire-and-forget task the controller keeps a reference to (and cancels on stop)."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("broker task %s failed", task.get_name(), exc_info=task.exception())

    def add_service(self, fn: Callable[[], Awaitable[None]], name: str) -> None:
        """A periodic service (a coroutine function that loops); started with the broker."""
        self._services.append((fn, name))
        if self._running:
            self._service_tasks.append(asyncio.get_running_loop().create_task(fn(), name=name))  # type: ignore[arg-type]

    def put_message(self, msg: Message, queue_id: int) -> PutMessageResult:
        """A put made by the broker itself (send-back copies); held pulls wake through the store's put
        listener (:meth:`on_put`) as for every put."""
        return self.store.put_message(msg, queue_id)

    def on_put(self, topic: str, queue_id: int, max_offset: int) -> None:
        """The store's put listener (``NotifyMessageArrivingListener``): wake the pulls held on the
        queue, on the next loop iteration (after the put's own response is on its way)."""
        asyncio.get_running_loop().call_soon(self.pull_holds.notify_message_arriving, topic, queue_id, max_offset)

    def _index_pending(self) -> None:
        """A put left index keys waiting (``MessageStore.defer_index``): they are written two loop steps on,
        after the answers to the requests read in this iteration (queued after the put) are written, with
        the keys of every put made meanwhile - ``ReputMessageService``'s index build after the answer."""
        loop = asyncio.get_running_loop()
        loop.call_soon(loop.call_soon, self.store.drain_index)

    # --- start / stop -----------------------------------------------------------------------------
    async def start(self) -> BrokerController:
        await self.server.start()
        if self.server.port != self.config.listen_port:   # port 0: the one the OS gave us
            self.config = replace(self.config, listen_port=self.server.port)
            self.consumers.config = self.config
        try:
            store_cfg = self.config.message_store_config()
            self.store = MessageStore.open(store_cfg.store_path_root_dir, config=store_cfg, create=True)
        except BaseException:
            await self.server.stop()
            raise
        try:
            self.topics = TopicConfigManager(self.store.topic_config, self.config, on_change=self.request_register,
                                             on_new_topics=self.request_register)
            self.topics.init_system_topics()
            self.offsets = BrokerOffsetManager(self.store.root)
            self.offsets.load()
            self.subscription_groups = SubscriptionGroupManager(self.store.root)
            self.subscription_groups.load()
            self.store.put_listeners.append(self.on_put)
            self.store.defer_index(self._index_pending)
            self.flusher = FlushService(self.store, interval_ms=self.config.flush_interval_commit_log,
                                        sync_timeout_ms=self.config.sync_flush_timeout)
            for module in (send, pull, queries, client_manager, locks):
                module.register(self)
            self._wire_modules()
            self.add_service(self.flusher.run_periodic, "flush-commitlog")
            self.add_service(self._persist_service, "persist-offsets")
            self.add_service(self._register_service, "register-broker")
            self._running = True
            for fn, name in self._services:
                self._service_tasks.append(asyncio.get_running_loop().create_task(fn(), name=name))  # type: ignore[arg-type]
            if self.schedule is not None:
                self.schedule.start()
            if self.transactions is not None:
                self.transactions.start()
            await self.register_now()
        except BaseException:
            await self.stop()
            raise
        return self

    def _wire_modules(self) -> None:
        """The processors that are not the core's: retry/delay, admin codes, ACL."""
        self.schedule = ScheduleMessageService(self.store, self.store.config.delay_levels_ms,
                                               self.store.root / "config")
        self.schedule.load()
        send_back.register(self)
        self.transactions = transaction.register(self)   # END_TRANSACTION + the check-back service
        admin.register(self)
        acl.register(self)   # adds its request hook when aclEnable

    async def stop(self) -> None:
        """Clean stop: unregister, stop services and the server, persist, close the store."""
        was_running, self._running = self._running, False
        if was_running:
            await self._unregister_all()
        for task in self._service_tasks:
            task.cancel()
        for task in self._service_tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._service_tasks.clear()
        if self.flusher is not None:   # the flush in progress ends before anything is closed
            await self.flusher.stop()
        self.pull_holds.stop()
        if self.transactions is not None:
            self.transactions.stop()
        if self.schedule is not None:
            try:
                self.schedule.stop()
            except Exception:   # the rest of the stop must still happen; logged with its traceback
                log.exception("stopping the schedule service failed")
        await self.server.stop()
        for task in list(self._tasks):
            task.cancel()
        for ch in list(self._ns_channels.values()):
            await ch.aclose()
        self._ns_channels.clear()
        try:
            if self.topics is not None:   # auto-created topics still waiting for their topics.json write
                self.topics.flush()
            if self.offsets is not None:
                self.offsets.persist()
            if self.subscription_groups is not None:
                self.subscription_groups.persist()
        finally:
            if self.store is not None:
                self.store.close()

    # --- services ---------------------------------------------------------------------------------
    async def _persist_service(self) -> None:
        """ConsumerOffsetManager.persist every flushConsumerOffsetInterval (5 s)."""
        period = max(self.config.flush_consumer_offset_interval, 100) / 1000.0
        groups_version = None
        while True:
            await asyncio.sleep(period)
            try:
                self.offsets.persist()
                if self.subscription_groups.data_version != groups_version:
                    self.subscription_groups.persist()
                    groups_version = dict(self.subscription_groups.data_version)
                if self.schedule is not None:
                    self.schedule.persist()
            except RocketStreamError:
                log.exception("persisting consumer offsets failed")

    async def _register_service(self) -> None:
        period = max(self.config.register_name_server_period, 10000) / 1000.0   # Java clamps to [10 s, 60 s]
        period = min(period, 60.0)
        while True:
            await asyncio.sleep(period)
            await self.register_now()

    # --- name server registration (BrokerOuterAPI) ------------------------------------------------
    def request_register(self, wrapper: dict[str, Any] | None = None) -> asyncio.Task | None:
        """Register with the name servers soon (a topic was created or changed); ``wrapper``: only these
        topics (``registerIncrementBrokerData``), else the whole table. The registration's task (it logs its
        failures and does not raise), or None when none was started."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:   # not started yet: start() registers anyway
            return None
        if self._running:
            return self.spawn(self.register_now(wrapper), "register-broker-now")
        return None

    async def register_now(self, wrapper: dict[str, Any] | None = None) -> None:
        """``registerBrokerAll``: REGISTER_BROKER to every name server, in parallel; failures are logged
        (the next period retries), as BrokerOuterAPI logs them. ``wrapper``: an incremental registration
        (the name server keeps the topics it leaves out)."""
        addrs = self.config.namesrv_addrs
        if not addrs:
            return
        async with self._register_lock:
            body = json_body.dumps({"filterServerList": [],
                                    "topicConfigSerializeWrapper": wrapper or self.topics.wrapper_json()})
            fields = {"brokerAddr": self.broker_addr, "brokerId": self.config.broker_id,
                      "brokerName": self.config.broker_name, "clusterName": self.config.broker_cluster_name,
                      "haServerAddr": f"{self.config.broker_ip1}:{self.config.listen_port + 1}",
                      "compressed": False, "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF}
            await asyncio.gather(*(self._register_one(addr, fields, body) for addr in addrs))

    async def _ns_channel(self, addr: str) -> Channel:
        ch = self._ns_channels.get(addr)
        if ch is None or ch.closed:
            ch = await connect(addr, ssl=self._ns_ssl)
            self._ns_channels[addr] = ch
        return ch

    async def _register_one(self, addr: str, fields: dict[str, object], body: bytes) -> None:
        try:
            ch = await self._ns_channel(addr)
            resp = await ch.invoke(RemotingCommand.request(RequestCode.REGISTER_BROKER, fields, body),
                                   REGISTER_BROKER_TIMEOUT_S)
            if resp.code != ResponseCode.SUCCESS:
                log.warning("registerBroker to name server %s answered %d: %s", addr, resp.code, resp.remark)
        except RemotingError as exc:
            log.warning("registerBroker to name server %s failed: %s", addr, exc)

    async def _unregister_all(self) -> None:
        fields = {"brokerAddr": self.broker_addr, "brokerId": self.config.broker_id,
                  "brokerName": self.config.broker_name, "clusterName": self.config.broker_cluster_name}
        for addr in self.config.namesrv_addrs:
            try:
                ch = await self._ns_channel(addr)
                await ch.invoke(RemotingCommand.request(RequestCode.UNREGISTER_BROKER, fields), 3.0)
            except RemotingError as exc:
                log.warning("unregisterBroker from name server %s failed: %s", addr, exc)
