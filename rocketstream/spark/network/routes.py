"""Network mode: the process's client loop, and the brokers the name server's routes name for the topics.

One asyncio loop thread per process carries every connection (:func:`process_client`); views are cheap
handles on it, and a forked worker gets a loop of its own. The driver asks the name server for each
topic's route (GET_ROUTEINFO_BY_TOPIC): every broker with a queue data that has the READ permission bit
serves readable queue ids ``0 .. readQueueNums-1`` (as ``MQClientInstance.topicRouteData2TopicSubscribeInfo``).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Sequence
from typing import NamedTuple, TypeVar

from rocketstream.client.api import MQClientAPI
from rocketstream.client.route import PERM_READ, TopicRouteData
from rocketstream.client.topic_list import all_topics, system_topics
from rocketstream.errors import OptionError, RocketStreamError
from rocketstream.remoting.loop import new_event_loop
from rocketstream.spark.secured import NOT_SECURED, SecuredOptions

T = TypeVar("T")

# The default of option requestTimeoutMs (ClientConfig.mqClientApiTimeout, 3 s); a query's own value
# travels in its locations.
REQUEST_TIMEOUT_S = 3.0


class NetworkClient:
    """An event loop in a daemon thread plus the :class:`MQClientAPI` (connections by address) on it."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = new_event_loop()   # uvloop's where installed (remoting/loop.py)
        self.apis: dict[tuple[str, SecuredOptions], MQClientAPI] = {}
        thread = threading.Thread(target=self.loop.run_forever, name="rocketstream-spark-net", daemon=True)
        thread.start()

    def run(self, coro: Awaitable[T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)  # type: ignore[arg-type]

    def submit(self, coro: Awaitable[T]) -> asyncio.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type, return-value]

    def api_for(self, namesrv: str, secured: SecuredOptions = NOT_SECURED) -> MQClientAPI:
        """The client API of ``namesrv`` for one account and TLS setting (signing every request with
        ``secured.credentials``); queries with other credentials never share connections."""
        key = (namesrv, secured)
        api = self.apis.get(key)
        if api is None:
            api = self.apis[key] = MQClientAPI(namesrv, credentials=secured.credentials, tls=secured.tls)
        return api


_CLIENT: NetworkClient | None = None
_CLIENT_LOCK = threading.Lock()


def process_client() -> NetworkClient:
    """This process's client (made on first use)."""
    global _CLIENT
    with _CLIENT_LOCK:
        if _CLIENT is None or _CLIENT.pid != os.getpid():  # a forked worker gets its own loop
            _CLIENT = NetworkClient()
        return _CLIENT


class ReadableBroker(NamedTuple):
    """A broker with readable queues of the topics asked: its address and queue ids per topic."""

    name: str
    addr: str
    queues: tuple[tuple[str, tuple[int, ...]], ...]  # (topic, readable queue ids), topics in name order


def name_server_topics(namesrv: str, timeout_s: float = REQUEST_TIMEOUT_S,
                       secured: SecuredOptions = NOT_SECURED) -> tuple[list[str], list[str]]:
    """Every topic the name server knows (GET_ALL_TOPIC_LIST_FROM_NAMESERVER, as ``mqadmin topicList`` asks)
    and the names it calls system topics (GET_SYSTEM_TOPIC_LIST_FROM_NS: the cluster and broker names, which
    brokers register as topics); raw names, namespaces included. ``secured``: the query's TLS and account
    (a name server behind TLS refuses a plain connection)."""
    client = process_client()
    api = client.api_for(namesrv, secured)

    async def ask() -> tuple[list[str], list[str]]:
        return await all_topics(api, timeout_s), await system_topics(api, timeout_s)

    try:
        return client.run(ask())
    except RocketStreamError as exc:
        raise RocketStreamError(f"name server {namesrv}: cannot list its topics: {exc}") from exc


def readable_brokers(namesrv: str, topics: Sequence[str], timeout_s: float = REQUEST_TIMEOUT_S,
                     secured: SecuredOptions = NOT_SECURED) -> tuple[ReadableBroker, ...]:
    """The brokers holding readable queues of ``topics``, by the name server's routes, in name order. A
    topic without a route is an OptionError naming it (a typo far more often than a topic yet to be
    created); so is a set of topics no broker serves a readable queue of. With a namespace the routes
    asked are those of the wrapped names (``ns%topic``); the answer keeps the user's names."""
    client = process_client()
    api = client.api_for(namesrv, secured)

    async def routes() -> list[TopicRouteData | None]:
        return list(await asyncio.gather(*(api.get_route(secured.wrap(t), timeout_s) for t in topics)))

    try:
        found = client.run(routes())
    except RocketStreamError as exc:
        raise RocketStreamError(f"name server {namesrv}: cannot read the routes of {', '.join(topics)}: {exc}") from exc
    missing = [t for t, r in zip(topics, found, strict=True) if r is None]
    if missing:
        shown = ", ".join(t if secured.wrap(t) == t else f"{t} ({secured.wrap(t)} in namespace {secured.namespace})"
                          for t in missing)
        raise OptionError("topic", f"name server {namesrv} has no route for topic {shown}")
    addrs: dict[str, str] = {}
    queues: dict[str, dict[str, tuple[int, ...]]] = {}
    for topic, route in zip(topics, found, strict=True):
        assert route is not None
        for qd in route.queue_datas:
            if not qd.perm & PERM_READ or qd.read_queue_nums <= 0:
                continue
            bd = route.broker(qd.broker_name)
            addr = bd.master_addr() or bd.select_addr() if bd is not None else None
            if addr is None:
                continue  # no broker address yet: the queues are unreachable (as the Java client skips them)
            addrs[qd.broker_name] = addr
            queues.setdefault(qd.broker_name, {})[topic] = tuple(range(qd.read_queue_nums))
    if not queues:
        raise OptionError("topic", f"no broker serves a readable queue of {', '.join(topics)} "
                                   f"(name server {namesrv}; read permission or addresses missing)")
    return tuple(ReadableBroker(name, addrs[name], tuple(sorted(queues[name].items()))) for name in sorted(queues))


__all__ = ["REQUEST_TIMEOUT_S", "NetworkClient", "ReadableBroker", "name_server_topics", "process_client",
           "readable_brokers"]
