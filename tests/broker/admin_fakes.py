"""A stand-in BrokerController for the admin processor tests: a real MessageStore in a temp dir plus
minimal managers with the method names of the broker plan (docs: /work/broker-plan.md interfaces)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from rocketstream.namesrv.route_info import DataVersion
from rocketstream.store import Message, MessageStore, StoreConfig


@dataclass
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 4
    write_queue_nums: int = 4
    perm: int = 6
    topic_sys_flag: int = 0
    order: bool = False


class Topics:
    """Like core's TopicConfigManager: changes call ``on_change`` (the controller's request_register)."""

    def __init__(self, cluster: str, broker: str, on_change=None) -> None:
        self.on_change = on_change
        self.table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion(timestamp=int(time.time() * 1000), counter=0)
        for name, q, perm in (("SELF_TEST_TOPIC", 1, 6), ("TBW102", 8, 7), ("BenchmarkTest", 1024, 6),
                              (cluster, 16, 7), (broker, 1, 7), ("OFFSET_MOVED_EVENT", 1, 6),
                              ("SCHEDULE_TOPIC_XXXX", 18, 6), (f"{cluster}_REPLY_TOPIC", 1, 6)):
            self.table[name] = TopicConfig(name, q, q, perm)

    def _bump(self) -> None:
        self.data_version = DataVersion(timestamp=int(time.time() * 1000), counter=self.data_version.counter + 1)
        if self.on_change is not None:
            self.on_change()

    def get(self, topic):
        return self.table.get(topic)

    def create(self, topic, read_q, write_q, perm, sys_flag=0):
        self.table[topic] = TopicConfig(topic, read_q, write_q, perm, sys_flag)
        self._bump()
        return self.table[topic]

    def delete(self, topic):
        del self.table[topic]
        self._bump()

    def all(self):
        return dict(self.table)


class Offsets:
    def __init__(self) -> None:
        self.t: dict[str, dict[int, int]] = {}

    def commit_offset(self, client_host, group, topic, queue_id, offset):
        self.t.setdefault(f"{topic}@{group}", {})[queue_id] = offset

    def query_offset(self, group, topic, queue_id):
        return self.t.get(f"{topic}@{group}", {}).get(queue_id, -1)

    def table(self):
        return {k: dict(v) for k, v in self.t.items()}

    def topics_of_group(self, group):
        return {k.split("@", 1)[0] for k in self.t if k.split("@", 1)[1] == group}

    def groups_of_topic(self, topic):
        return {k.split("@", 1)[1] for k in self.t if k.split("@", 1)[0] == topic}

    def remove_offset(self, group):
        for k in [k for k in self.t if k.split("@", 1)[1] == group]:
            del self.t[k]


@dataclass
class ClientChannelInfo:
    channel: object
    client_id: str
    language: str = "JAVA"
    version: int = 409
    last_update_ms: int = 0


@dataclass
class SubscriptionData:
    topic: str
    sub_string: str = "*"
    tags_set: set = field(default_factory=set)
    code_set: set = field(default_factory=set)
    sub_version: int = 0
    expression_type: str = "TAG"


@dataclass
class ConsumerGroupInfo:
    channels: dict = field(default_factory=dict)
    subscriptions: dict = field(default_factory=dict)
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"


class Consumers:
    def __init__(self) -> None:
        self.groups: dict[str, ConsumerGroupInfo] = {}

    def group_info(self, group):
        return self.groups.get(group)

    def groups_of_topic(self, topic):
        return {g for g, info in self.groups.items() if topic in info.subscriptions}


@dataclass
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True


class SubscriptionGroups:
    def __init__(self) -> None:
        self.table = {g: SubscriptionGroupConfig(g) for g in ("SELF_TEST_C_GROUP", "TOOLS_CONSUMER")}
        self.data_version = DataVersion(timestamp=int(time.time() * 1000), counter=0)

    def get(self, group):
        return self.table.get(group)

    def find_or_create(self, group, auto_create):
        cfg = self.table.get(group)
        if cfg is None and auto_create:
            cfg = self.table[group] = SubscriptionGroupConfig(group)
        return cfg

    def update(self, cfg):
        self.table[cfg.group_name] = cfg

    def delete(self, group):
        self.table.pop(group, None)

    def all(self):
        return dict(self.table)


class Schedule:
    def __init__(self) -> None:
        self.table: dict[int, int] = {}

    def offset_table(self):
        return dict(self.table)


class Producers:
    def __init__(self) -> None:
        self.table: dict[str, dict] = {}   # group -> {client_id: ClientChannelInfo}, as core's ProducerManager


class Server:
    def __init__(self) -> None:
        self.processors: dict = {}

    def register(self, code, fn):
        self.processors[code] = fn


@dataclass
class BrokerConfig:
    broker_name: str = "broker-a"
    broker_cluster_name: str = "DefaultCluster"
    broker_id: int = 0
    broker_ip1: str = "127.0.0.1"
    listen_port: int = 10911
    namesrv_addr: str | None = None
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    long_polling_enable: bool = True
    short_polling_time_mills: int = 1000
    default_topic_queue_nums: int = 8
    broker_permission: int = 6


class Controller:
    def __init__(self, root: Path, server=None) -> None:
        self.config = BrokerConfig()
        self.store = MessageStore.open(root, config=StoreConfig(root, mapped_file_size_commit_log=1 << 20,
                                                                mapped_file_size_consume_queue=20 * 1000))
        self.topics = Topics(self.config.broker_cluster_name, self.config.broker_name, self.request_register)
        self.offsets = Offsets()
        self.consumers = Consumers()
        self.producers = Producers()
        self.subscription_groups = SubscriptionGroups()
        self.schedule = Schedule()
        self.server = server or Server()
        self.registrations = 0

    @property
    def broker_addr(self) -> str:
        return f"{self.config.broker_ip1}:{self.config.listen_port}"

    def request_register(self) -> None:
        self.registrations += 1

    def put(self, topic: str, queue_id: int, n: int, tags: str | None = None) -> None:
        for i in range(n):
            r = self.store.put_message(Message(topic, f"m{i}".encode(), tags=tags), queue_id)
            assert r.status.name == "PUT_OK", r
