"""``MQClientInstance``: one per process and (name server list, instance name), shared by every producer
and consumer created with them.

It owns an asyncio event loop running in a daemon thread (all network I/O happens there; the public
API bridges with :meth:`MQClientInstance.run`), the connections (:class:`~rocketstream.client.api.MQClientAPI`),
the route table and the broker address table, and the scheduled tasks of
``MQClientInstance.startScheduledTask`` / ``RebalanceService`` (spec §2.21, §5.11):

* routes of every topic of registered producers and consumers, every 30 s (first after 10 ms);
* heartbeat to every broker, every 30 s (first after 1 s), and :meth:`send_heartbeat_now`;
* consumer offsets persisted every 5 s (first after 10 s): ``consumer.persist_offsets()``;
* rebalance every 20 s and at once on NOTIFY_CONSUMER_IDS_CHANGED: ``consumer.do_rebalance()``.

``shutdown`` unregisters (UNREGISTER_CLIENT) from every known broker and stops the loop once the last
producer/consumer has left.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import ipaddress
import logging
import os
import random
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar

from rocketstream.client import client_remoting, transaction_check
from rocketstream.client.api import MQClientAPI
from rocketstream.client.common import CLIENT_INNER_PRODUCER_GROUP, MessageQueue
from rocketstream.client.credentials import Credentials
from rocketstream.client.route import (
    MASTER_ID,
    QueueData,
    TopicPublishInfo,
    TopicRouteData,
    publish_info,
    subscribe_queues,
)
from rocketstream.client.tls import TlsConfig, tls_config
from rocketstream.errors import MQClientError, RemotingError, RemotingTimeoutError
from rocketstream.remoting import Channel, RemotingCommand, RequestCode
from rocketstream.remoting.channel import unsupported
from rocketstream.remoting.loop import new_event_loop

__all__ = ["MQClientInstance", "ConsumerLike", "ProducerLike", "POLL_NAME_SERVER_INTERVAL_S",
           "HEARTBEAT_BROKER_INTERVAL_S", "PERSIST_CONSUMER_OFFSET_INTERVAL_S", "REBALANCE_WAIT_INTERVAL_S",
           "local_ip"]

log = logging.getLogger("rocketstream.client")

T = TypeVar("T")

# ClientConfig / RebalanceService defaults (ms in RocketMQ, seconds here)
POLL_NAME_SERVER_INTERVAL_S = 30.0          # pollNameServerInterval
HEARTBEAT_BROKER_INTERVAL_S = 30.0          # heartbeatBrokerInterval
PERSIST_CONSUMER_OFFSET_INTERVAL_S = 5.0    # persistConsumerOffsetInterval
REBALANCE_WAIT_INTERVAL_S = 20.0            # rocketmq.client.rebalance.waitInterval
FIRST_ROUTE_DELAY_S = 0.01
FIRST_HEARTBEAT_DELAY_S = 1.0
FIRST_PERSIST_DELAY_S = 10.0


class ConsumerLike(Protocol):
    """What the instance calls on a registered consumer (push or lite pull)."""

    def consumer_data(self) -> dict[str, Any]: ...
    def subscribed_topics(self) -> set[str]: ...
    def do_rebalance(self) -> Awaitable[None]: ...
    def persist_offsets(self) -> Awaitable[None]: ...
    def update_topic_subscribe_info(self, topic: str, mqs: set[MessageQueue]) -> None: ...


class ProducerLike(Protocol):
    def publish_topics(self) -> set[str]: ...
    def update_topic_publish_info(self, topic: str, info: TopicPublishInfo) -> None: ...


def local_ip() -> str:
    """``RemotingUtil.getLocalAddress``-like: the outgoing non-loopback IPv4, else the host's, else 127.0.0.1."""
    with contextlib.suppress(OSError, ValueError):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))   # sends nothing: picks the outgoing interface
            ip = s.getsockname()[0]
            if not ipaddress.IPv4Address(ip).is_loopback and ip != "0.0.0.0":
                return str(ip)
    with contextlib.suppress(OSError, ValueError):
        ip = socket.gethostbyname(socket.gethostname())
        if not ipaddress.IPv4Address(ip).is_loopback:
            return str(ip)
    return "127.0.0.1"


def _copy_outcome(fut: concurrent.futures.Future[Any], task: asyncio.Task[Any]) -> None:
    """A finished task's result / exception / cancellation into the caller's future (unless it gave up)."""
    if not fut.set_running_or_notify_cancel():
        return
    if task.cancelled():
        fut.set_exception(concurrent.futures.CancelledError())
        return
    exc = task.exception()
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(task.result())


def _cancel_task_if_cancelled(loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any],
                              fut: concurrent.futures.Future[Any]) -> None:
    if fut.cancelled() and not task.done():
        with contextlib.suppress(RuntimeError):   # the loop is closed: the task is gone with it
            loop.call_soon_threadsafe(task.cancel)


class MQClientInstance:
    _registry: dict[tuple[str, str, Credentials | None, TlsConfig | None], MQClientInstance] = {}
    _registry_lock = threading.Lock()

    @classmethod
    def get(cls, namesrv: str, instance_name: str = "DEFAULT", *,
            credentials: Credentials | None = None, tls: TlsConfig | bool | None = None) -> MQClientInstance:
        """``MQClientManager.getOrCreateMQClientInstance``: shared per (name servers, instance name,
        credentials, TLS settings). Java keys by client id only and keeps the RPC hook of whoever came first, so
        a second client with other credentials would silently sign with the first one's; here it gets its own
        instance (and connections) instead. Likewise a client with other TLS settings (``tls``: a
        :class:`~rocketstream.client.tls.TlsConfig` or True) never shares another's plain or TLS connections."""
        tls = tls_config(tls)
        key = (namesrv.strip(), instance_name, credentials, tls)
        with cls._registry_lock:
            inst = cls._registry.get(key)
            if inst is None or inst._stopped:
                inst = cls._registry[key] = cls(namesrv, instance_name, credentials=credentials, tls=tls)
            return inst

    def __init__(self, namesrv: str, instance_name: str = "DEFAULT", *,
                 credentials: Credentials | None = None, tls: TlsConfig | bool | None = None) -> None:
        self.namesrv = namesrv.strip()
        self.instance_name = instance_name
        # ClientConfig.buildMQClientId: ip@instanceName, "DEFAULT" -> pid#nanoTime
        name = f"{os.getpid()}#{time.monotonic_ns()}" if instance_name == "DEFAULT" else instance_name
        self.client_id = f"{local_ip()}@{name}"
        self.api = MQClientAPI(self.namesrv, on_request=self._on_request, credentials=credentials, tls=tls)
        self.loop = new_event_loop()   # uvloop's where installed (remoting/loop.py)
        self._thread: threading.Thread | None = None
        self._lock = threading.RLock()
        self._started = False
        self._stopped = False
        self.producers: dict[str, ProducerLike] = {}
        self.consumers: dict[str, ConsumerLike] = {}
        self.consumer_start_ms: dict[str, int] = {}         # PROP_CONSUMER_START_TIMESTAMP (client_remoting)
        self.routes: dict[str, TopicRouteData] = {}
        self.broker_addrs: dict[str, dict[int, str]] = {}   # brokerAddrTable
        self._tasks: list[asyncio.Task[None]] = []
        self._submit_lock = threading.Lock()   # call_soon(): calls waiting for the loop
        self._submitted: list[tuple[Callable[..., object], tuple[Any, ...]]] = []
        self._drain_scheduled = False
        self._rebalance_wakeup: asyncio.Event | None = None
        self.route_refresh_interval = POLL_NAME_SERVER_INTERVAL_S
        self.heartbeat_interval = HEARTBEAT_BROKER_INTERVAL_S
        self.persist_interval = PERSIST_CONSUMER_OFFSET_INTERVAL_S
        self.rebalance_interval = REBALANCE_WAIT_INTERVAL_S

    def __repr__(self) -> str:
        return f"MQClientInstance({self.client_id}, namesrv={self.namesrv})"

    # ------------------------------------------------------------------------- loop bridge
    def start(self) -> MQClientInstance:
        with self._lock:
            if self._stopped:
                raise MQClientError(f"client instance {self.client_id} has been shut down")
            if self._started:
                return self
            self._thread = threading.Thread(target=self._run_loop, name=f"rocketstream-client-{self.instance_name}",
                                            daemon=True)
            self._thread.start()
            self._started = True
            self.run(self._start_tasks(), 10.0)
        return self

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
                for t in pending:
                    t.cancel()
                if pending:
                    self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.close()

    @property
    def running(self) -> bool:
        return self._started and not self._stopped

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None) -> T:
        """Run ``coro`` on the loop and wait (``timeout`` None: no limit); a coroutine still running at
        the timeout is cancelled and RemotingTimeoutError raised."""
        if not self._started or self._stopped or not self.loop.is_running() and self._thread is None:
            coro.close()
            raise MQClientError(f"client instance {self.client_id} is not running")
        if threading.current_thread() is self._thread:
            coro.close()
            raise MQClientError("MQClientInstance.run called from the client's own loop thread (await instead)")
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()
        try:
            self.call_soon(self._start_task, coro, fut)
        except MQClientError:
            coro.close()
            raise
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise RemotingTimeoutError(f"operation did not finish within {timeout:g} s", addr=self.namesrv,
                                       timeout_s=timeout) from None

    def call_soon(self, fn: Callable[..., object], *args: Any) -> None:
        """``fn(*args)`` on the loop, from any thread (``loop.call_soon_threadsafe``). That wakes the loop
        with a write to its self-pipe for every call; calls made while a wake-up is pending ride on it and
        run together, in order. MQClientError when the loop is gone."""
        with self._submit_lock:
            self._submitted.append((fn, args))
            wake = not self._drain_scheduled
            self._drain_scheduled = True
        if wake:
            try:
                self.loop.call_soon_threadsafe(self._run_submitted)
            except RuntimeError:   # the loop closed meanwhile
                with self._submit_lock:
                    self._drain_scheduled = False
                    self._submitted.clear()
                raise MQClientError(f"client instance {self.client_id} is not running") from None

    def _run_submitted(self) -> None:
        with self._submit_lock:
            calls, self._submitted = self._submitted, []
            self._drain_scheduled = False
        for fn, args in calls:
            try:
                fn(*args)
            except Exception:   # one caller's failure must not lose the others' calls
                log.exception("%s: call on the client loop failed", self.client_id)

    def _start_task(self, coro: Coroutine[Any, Any, Any], fut: concurrent.futures.Future[Any]) -> None:
        """On the loop: a task for a coroutine given to :meth:`run`, its outcome copied to the caller's future;
        the caller's cancel (its timeout) cancels the task (as run_coroutine_threadsafe chains them)."""
        if fut.cancelled():
            coro.close()
            return
        task = self.loop.create_task(coro)
        task.add_done_callback(functools.partial(_copy_outcome, fut))
        fut.add_done_callback(functools.partial(_cancel_task_if_cancelled, self.loop, task))

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any] | asyncio.Task[Any]:
        """Fire and forget on the loop; an exception is logged. From the loop thread: a Task."""
        def done(f: Any) -> None:
            if f.cancelled():
                return
            exc = f.exception()
            if exc is not None:
                log.warning("%s: background task failed: %s", self.client_id, exc, exc_info=exc)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            task = self.loop.create_task(coro)
            task.add_done_callback(done)
            return task
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        fut.add_done_callback(done)
        return fut

    # ------------------------------------------------------------------------- registration
    def register_producer(self, group: str, producer: ProducerLike) -> None:
        with self._lock:
            if group in self.producers:
                raise MQClientError(f"the producer group[{group}] has been created before, specify another "
                                    "name please")
            self.producers[group] = producer

    def register_consumer(self, group: str, consumer: ConsumerLike) -> None:
        with self._lock:
            if group in self.consumers:
                raise MQClientError(f"the consumer group[{group}] has been created before, specify another "
                                    "name please")
            self.consumers[group] = consumer
            self.consumer_start_ms[group] = int(time.time() * 1000)

    async def unregister_producer(self, group: str) -> None:
        """Remove the group and send UNREGISTER_CLIENT for it to every broker (``unregisterProducer``)."""
        with self._lock:
            self.producers.pop(group, None)
        await self._unregister_everywhere(producer_group=group)

    async def unregister_consumer(self, group: str) -> None:
        with self._lock:
            self.consumers.pop(group, None)
            self.consumer_start_ms.pop(group, None)
        await self._unregister_everywhere(consumer_group=group)

    async def _unregister_everywhere(self, producer_group: str | None = None,
                                     consumer_group: str | None = None) -> None:
        addrs = [a for table in list(self.broker_addrs.values()) for a in table.values()]
        results = await asyncio.gather(*[self.api.unregister(a, self.client_id, producer_group, consumer_group)
                                         for a in addrs], return_exceptions=True)
        for addr, res in zip(addrs, results, strict=True):
            if isinstance(res, BaseException):
                log.warning("%s: unregister %s from %s failed: %s", self.client_id,
                            producer_group or consumer_group, addr, res)

    # ------------------------------------------------------------------------- routes
    def topic_route(self, topic: str) -> TopicRouteData | None:
        return self.routes.get(topic)

    async def find_route(self, topic: str, why: str) -> TopicRouteData:
        """The route of ``topic``, fetched from the name server once when it is not known yet;
        MQClientError ("no route for topic T: <why>") when the name server has none."""
        route = self.routes.get(topic)
        if route is None:
            await self.update_route(topic)
            route = self.routes.get(topic)
        if route is None:
            raise MQClientError(f"no route for topic {topic}: {why}")
        return route

    def broker_addr(self, broker_name: str) -> str | None:
        """``findBrokerAddressInPublish``: the master's address."""
        return self.broker_addrs.get(broker_name, {}).get(MASTER_ID)

    async def find_master_addr(self, broker_name: str, topic: str) -> str:
        """The master's address of ``broker_name``, the route of ``topic`` fetched once when it is unknown
        (``findBrokerAddressInPublish`` then ``updateTopicRouteInfoFromNameServer``, as
        ``RemoteBrokerOffsetStore`` and ``RebalanceImpl`` look a broker up); MQClientError when there is none."""
        addr = self.broker_addr(broker_name)
        if addr is None:
            await self.update_route(topic)
            addr = self.broker_addr(broker_name)
        if addr is None:
            raise MQClientError(f"the broker[{broker_name}] does not exist (topic {topic})")
        return addr

    def find_broker_for_subscribe(self, broker_name: str, broker_id: int = MASTER_ID,
                                  only_this_broker: bool = False) -> tuple[str, bool] | None:
        """``findBrokerAddressInSubscribe``: (address, is_slave) of ``broker_id``, else id + 1 (a slave),
        else any address unless ``only_this_broker``."""
        table = self.broker_addrs.get(broker_name)
        if not table:
            return None
        addr = table.get(broker_id)
        if addr is None and broker_id != MASTER_ID:
            addr = table.get(broker_id + 1)
        if addr is not None:
            return addr, broker_id != MASTER_ID
        if only_this_broker:
            return None
        bid, addr = next(iter(table.items()))
        return addr, bid != MASTER_ID

    async def update_route(self, topic: str, *, default_topic: str | None = None,
                           default_queue_nums: int = 4, timeout: float = 3.0) -> bool:
        """``updateTopicRouteInfoFromNameServer``: fetch the route of ``topic`` (or, with ``default_topic``,
        the route of the default topic with queue counts capped at ``default_queue_nums``), update the
        broker table and the producers' / consumers' views. False when the name server has no route."""
        route = await self.api.get_route(default_topic or topic, timeout)
        if route is None:
            return False
        if default_topic is not None:
            capped = tuple(QueueData(q.broker_name, min(default_queue_nums, q.read_queue_nums),
                                     min(default_queue_nums, q.read_queue_nums), q.perm, q.topic_sys_flag)
                           for q in route.queue_datas)
            route = TopicRouteData(capped, route.broker_datas, route.order_topic_conf)
        self._apply_route(topic, route)
        return True

    def _apply_route(self, topic: str, route: TopicRouteData) -> None:
        for bd in route.broker_datas:
            self.broker_addrs[bd.broker_name] = dict(bd.broker_addrs)
        self.routes[topic] = route
        info = publish_info(topic, route)
        for producer in list(self.producers.values()):
            if topic in producer.publish_topics():
                producer.update_topic_publish_info(topic, info)
        mqs = subscribe_queues(topic, route)
        for consumer in list(self.consumers.values()):
            if topic in consumer.subscribed_topics():
                consumer.update_topic_subscribe_info(topic, mqs)

    def _all_topics(self) -> set[str]:
        topics: set[str] = set()
        for p in list(self.producers.values()):
            topics |= p.publish_topics()
        for c in list(self.consumers.values()):
            topics |= c.subscribed_topics()
        return topics

    async def refresh_routes(self) -> None:
        for topic in sorted(self._all_topics()):
            try:
                await self.update_route(topic)
            except RemotingError as exc:
                log.warning("%s: route of %s not updated: %s", self.client_id, topic, exc)

    # ------------------------------------------------------------------------- heartbeat
    def heartbeat_data(self) -> dict[str, Any]:
        """``prepareHeartbeatData``: every producer group (+ CLIENT_INNER_PRODUCER) and consumer."""
        groups = sorted(set(self.producers) | {CLIENT_INNER_PRODUCER_GROUP})
        return {"clientID": self.client_id,
                "producerDataSet": [{"groupName": g} for g in groups],
                "consumerDataSet": [c.consumer_data() for c in list(self.consumers.values())]}

    async def send_heartbeat_to_all(self) -> dict[str, int | BaseException]:
        """``sendHeartbeatToAllBroker``: producer-only processes heartbeat masters only."""
        data = self.heartbeat_data()
        only_masters = not self.consumers
        addrs = sorted({a for table in list(self.broker_addrs.values()) for bid, a in table.items()
                        if not only_masters or bid == MASTER_ID})
        results = await asyncio.gather(*[self.api.heartbeat(a, data) for a in addrs], return_exceptions=True)
        out: dict[str, int | BaseException] = {}
        for addr, res in zip(addrs, results, strict=True):
            out[addr] = res
            if isinstance(res, BaseException):
                log.warning("%s: heartbeat to %s failed: %s", self.client_id, addr, res)
        return out

    def send_heartbeat_now(self, timeout: float = 5.0) -> dict[str, int | BaseException]:
        return self.run(self.send_heartbeat_to_all(), timeout)

    # ------------------------------------------------------------------------- rebalance
    def rebalance_now(self) -> None:
        """``rebalanceImmediately``: wake the rebalance task (thread-safe)."""
        ev = self._rebalance_wakeup
        if ev is not None:
            self.loop.call_soon_threadsafe(ev.set)

    async def do_rebalance(self) -> None:
        for group, consumer in list(self.consumers.items()):
            try:
                await consumer.do_rebalance()
            except Exception:   # one group's failure must not stop the others (logged, not hidden)
                log.exception("%s: rebalance of %s failed", self.client_id, group)

    async def persist_all_offsets(self) -> None:
        for group, consumer in list(self.consumers.items()):
            try:
                await consumer.persist_offsets()
            except Exception:
                log.exception("%s: persisting offsets of %s failed", self.client_id, group)

    # ------------------------------------------------------------------------- scheduled tasks
    async def _start_tasks(self) -> None:
        self._rebalance_wakeup = asyncio.Event()
        self._tasks = [
            asyncio.create_task(self._every(FIRST_ROUTE_DELAY_S, lambda: self.route_refresh_interval,
                                            self.refresh_routes), name="route-refresh"),
            asyncio.create_task(self._every(FIRST_HEARTBEAT_DELAY_S, lambda: self.heartbeat_interval,
                                            self._heartbeat_task), name="heartbeat"),
            asyncio.create_task(self._every(FIRST_PERSIST_DELAY_S, lambda: self.persist_interval,
                                            self.persist_all_offsets), name="persist-offsets"),
            asyncio.create_task(self._rebalance_service(), name="rebalance"),
        ]

    async def _heartbeat_task(self) -> None:
        await self.send_heartbeat_to_all()

    async def _every(self, first: float, interval: Callable[[], float],
                     job: Callable[[], Awaitable[Any]]) -> None:
        await asyncio.sleep(first)
        while True:
            try:
                await job()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: scheduled task failed", self.client_id)
            await asyncio.sleep(interval())

    async def _rebalance_service(self) -> None:
        """``RebalanceService.run``: wait up to 20 s (or a wakeup), then rebalance every consumer."""
        ev = self._rebalance_wakeup
        assert ev is not None
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(ev.wait(), self.rebalance_interval)
            ev.clear()
            if self.consumers:
                await self.do_rebalance()

    # ------------------------------------------------------------------------- inbound requests
    def _on_request(self, channel: Channel, request: RemotingCommand) -> Any:
        """``ClientRemotingProcessor``: NOTIFY_CONSUMER_IDS_CHANGED wakes the rebalance; 307, 309, 220 and 221
        are answered by client_remoting.py; CHECK_TRANSACTION_STATE (39) goes to the transactional producer of
        its group (client/transaction_check.py); anything else is answered REQUEST_CODE_NOT_SUPPORTED (nothing
        for a oneway request)."""
        if request.code in client_remoting.HANDLED:
            return client_remoting.handle_request(self, request)
        if request.code == RequestCode.CHECK_TRANSACTION_STATE:   # oneway; the producer answers END_TRANSACTION
            return transaction_check.handle_check_transaction_state(self.producers, channel, request)
        if request.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            group = (request.ext_fields or {}).get("consumerGroup")
            log.info("%s: consumer ids of %s changed (broker %s): rebalance now", self.client_id, group, channel.addr)
            ev = self._rebalance_wakeup
            if ev is not None:
                ev.set()
            return None
        if request.is_oneway:
            return None
        return unsupported(request)

    # ------------------------------------------------------------------------- shutdown
    def shutdown(self, *, force: bool = False, timeout: float = 10.0) -> None:
        """Stop when no producer / consumer is left (or ``force``): UNREGISTER_CLIENT for every remaining
        group and CLIENT_INNER_PRODUCER to every broker, close the connections, stop the loop thread."""
        with self._lock:
            if self._stopped or not self._started:
                self._stopped = True
                return
            if (self.producers or self.consumers) and not force:
                return
            self._stopped = True
        try:
            fut = asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop)
            fut.result(timeout)
        except (concurrent.futures.TimeoutError, RemotingError) as exc:
            log.warning("%s: shutdown did not finish cleanly: %s", self.client_id, exc)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            if self._thread is not None:
                self._thread.join(timeout)
            with self._registry_lock:
                key = (self.namesrv, self.instance_name, self.api.credentials, self.api.tls)
                if self._registry.get(key) is self:
                    del self._registry[key]

    async def _shutdown(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for g in list(self.consumers):
            await self.unregister_consumer(g)
        for g in list(self.producers):
            await self.unregister_producer(g)
        await self._unregister_everywhere(producer_group=CLIENT_INNER_PRODUCER_GROUP)
        await self.api.close()

    # random broker choice for GET_CONSUMER_LIST_BY_GROUP (findBrokerAddrByTopic)
    def any_broker_addr_of(self, topic: str) -> str | None:
        route = self.routes.get(topic)
        if route is None or not route.broker_datas:
            return None
        bd = random.choice(route.broker_datas)
        return bd.select_addr()
