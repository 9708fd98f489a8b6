"""A network-mode streaming query as a member of its consumer group, as brokers know consumers: by heartbeats.

A RocketMQ consumer makes itself known with HEART_BEAT (``MQClientInstance.sendHeartbeatToAllBroker``, every
``heartbeatBrokerInterval`` = 30 s) carrying its ``ConsumerData``: group, consume type, message model, where
to consume from and its subscriptions. On that heartbeat a broker (``ClientManageProcessor.heartBeat``)
creates the subscription group when ``autoCreateSubscriptionGroup`` is on, creates the group's
``%RETRY%<group>`` topic (``TopicConfigManager.createTopicInSendMessageBackMethod``, registered with the name
servers at once) and lists the client under the group (``mqadmin consumerConnection``). A 5.x broker accepts
UPDATE_CONSUMER_OFFSET only for a group it knows (``SUBSCRIPTION_GROUP_NOT_EXIST``, code 26), and
``mqadmin consumerProgress -g G`` finds a group's brokers through the route of ``%RETRY%G``: both need the
query to be known this way.

:class:`GroupPresence` is that part of a client for the query's planner (driver side): the first heartbeat is
sent, and answered, before the query's first offset commit (a refusal — a wrong secret, a missing permission —
fails the query at once with the broker's answer); then a daemon thread sends one every
:data:`HEARTBEAT_INTERVAL_S` to the brokers of the query's current routes, and :meth:`GroupPresence.close`
unregisters the client (UNREGISTER_CLIENT, as ``MQClientInstance.unregisterClient``). A planner process that
ends without ``close`` closes its connections: brokers drop a client whose channel closed
(``ClientHousekeepingService.onChannelClose``) or that stopped heartbeating for 120 s.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Sequence
from typing import Any

from rocketstream.client.common import CLIENT_INNER_PRODUCER_GROUP
from rocketstream.client.instance import local_ip
from rocketstream.client.rebalance import Subscription
from rocketstream.spark.broker_view import BrokerLocation
from rocketstream.spark.network.routes import process_client
from rocketstream.spark.network.view import NetworkBroker
from rocketstream.spark.options import RocketMQOptions

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 30.0  # ClientConfig.heartbeatBrokerInterval
CONSUME_ACTIVELY = "CONSUME_ACTIVELY"  # ConsumeType of pull consumers (DefaultLitePullConsumer)


def pull_consumer_heartbeat(client_id: str, group: str, subscriptions: Sequence[Subscription], *,
                            consume_from_where: str, message_model: str) -> dict[str, Any]:
    """``HeartbeatData`` of a pull consumer (``CONSUME_ACTIVELY``, as ``DefaultLitePullConsumer``'s) of ``group``:
    the inner producer group, as every Java client sends it, and one ``ConsumerData``."""
    return {"clientID": client_id,
            "producerDataSet": [{"groupName": CLIENT_INNER_PRODUCER_GROUP}],
            "consumerDataSet": [{"consumeFromWhere": consume_from_where, "consumeType": CONSUME_ACTIVELY,
                                 "groupName": group, "messageModel": message_model,
                                 "subscriptionDataSet": [s.to_json() for s in subscriptions],
                                 "unitMode": False}]}


def spark_client_id() -> str:
    """``ClientConfig.buildMQClientId`` (ip@instanceName), one instance name per call."""
    return f"{local_ip()}@rocketstream-spark-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class GroupPresence:
    """The query's consumer-group membership on every broker of its routes (see the module doc)."""

    def __init__(self, options: RocketMQOptions, interval_s: float = HEARTBEAT_INTERVAL_S) -> None:
        if options.name_server is None:
            raise ValueError("a group presence is for network mode (option nameServer)")
        self.options = options
        self.interval_s = interval_s
        secured = options.secured
        self.group = secured.wrap(options.consumer_group)
        # ClientConfig.buildMQClientId: ip@instanceName; one instance name per query
        self.client_id = spark_client_id()
        self._lock = threading.Lock()
        self._topics: tuple[str, ...] = ()
        self._subscriptions: list[Subscription] = []
        self._set_topics(options.topics)
        self._api = process_client().api_for(options.name_server, secured)
        self._timeout_s = options.request_timeout_ms / 1000   # option requestTimeoutMs
        self._addrs: tuple[str, ...] = ()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def _set_topics(self, topics: Sequence[str]) -> None:
        sql = self.options.subscription.sql is not None
        secured = self.options.secured
        subscriptions = [Subscription(secured.wrap(t), self.options.subscription, "SQL92" if sql else "TAG")
                         for t in topics]
        with self._lock:
            self._topics, self._subscriptions = tuple(topics), subscriptions

    def heartbeat_data(self) -> dict[str, Any]:
        """``HeartbeatData`` of this client: the inner producer group (as every Java client sends it) and the
        query's ``ConsumerData``, subscribed to the topics it reads now."""
        with self._lock:
            subscriptions = self._subscriptions
        return pull_consumer_heartbeat(self.client_id, self.group, subscriptions,
                                       consume_from_where=self.options.consume_from_where,
                                       message_model=self.options.message_model)

    @property
    def addrs(self) -> tuple[str, ...]:
        return self._addrs

    def keep(self, brokers: Sequence[BrokerLocation], topics: Sequence[str] | None = None) -> None:
        """Called by the planner before it commits: the first time, and whenever the brokers of the routes
        changed, every new broker gets a heartbeat now (a refusal raises the broker's answer,
        :class:`~rocketstream.errors.BrokerResponseError` naming its address); the background heartbeats
        then go to these brokers. ``topics``: the topics the query reads now (a ``topicPattern``'s change
        them); when they changed every broker gets a heartbeat with the new subscriptions now, as a Java
        consumer's next heartbeat after ``subscribe`` carries them."""
        addrs = tuple(sorted({b.addr for b in brokers if isinstance(b, NetworkBroker)}))
        resubscribed = topics is not None and tuple(topics) != self._topics
        if resubscribed:
            self._set_topics(topics or ())
        if addrs == self._addrs and self._thread is not None and not resubscribed:
            return
        new = list(addrs) if resubscribed else [a for a in addrs if a not in self._addrs]
        if new:
            self._beat(new)
        with self._lock:
            self._addrs = addrs
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"rocketstream-heartbeat-{self.group}",
                                            daemon=True)
            self._thread.start()

    def _beat(self, addrs: Sequence[str]) -> None:
        data = self.heartbeat_data()
        client = process_client()
        for addr in addrs:
            client.run(self._api.heartbeat(addr, data, self._timeout_s))

    def _run(self) -> None:
        while not self._stopped.wait(self.interval_s):
            with self._lock:
                addrs = self._addrs
            for addr in addrs:
                try:
                    self._beat([addr])
                except Exception as exc:  # noqa: BLE001 - as sendHeartbeatToAllBroker: logged, tried again next time
                    log.warning("%s: heartbeat of group %s to %s failed: %s", self.client_id, self.group, addr, exc)

    def close(self) -> None:
        """Stop heartbeating and unregister from every broker (``MQClientInstance.unregisterClient``); a broker
        that cannot be reached is logged (it drops the client when the connection closes or goes quiet)."""
        self._stopped.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(self._timeout_s)
        with self._lock:
            addrs, self._addrs = self._addrs, ()
        client = process_client()
        for addr in addrs:
            try:
                client.run(self._api.unregister(addr, self.client_id, None, self.group, self._timeout_s))
            except Exception as exc:  # noqa: BLE001 - closing must go on to the other brokers
                log.warning("%s: unregistering group %s from %s failed: %s", self.client_id, self.group, addr, exc)

    def __repr__(self) -> str:
        return f"GroupPresence({self.client_id!r}, group={self.group!r}, brokers={list(self._addrs)})"


__all__ = ["CONSUME_ACTIVELY", "GroupPresence", "HEARTBEAT_INTERVAL_S"]
