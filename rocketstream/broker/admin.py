"""The admin requests of RocketMQ 4.9.8's ``AdminBrokerProcessor`` that mqadmin and the Java admin API
(``DefaultMQAdminExt``) send to a broker (docs/remoting-protocol.md; spec §2.15-2.18).

Codes registered by :func:`register`:

==========  ==================================  =============================================================
code        name                                answer
==========  ==================================  =============================================================
17          UPDATE_AND_CREATE_TOPIC             create/update a topic config (``updateAndCreateTopic``)
215         DELETE_TOPIC_IN_BROKER              drop a topic config (``deleteTopic``)
21          GET_ALL_TOPIC_CONFIG                ``TopicConfigSerializeWrapper``
25 / 26     UPDATE / GET_BROKER_CONFIG          properties text in, properties text out (``Configuration``)
28          GET_BROKER_RUNTIME_INFO             ``KVTable`` (``prepareRuntimeInfo`` + store runtime info)
202         GET_TOPIC_STATS_INFO                ``TopicStatsTable`` (MessageQueue object keys)
203         GET_CONSUMER_CONNECTION_LIST        ``ConsumerConnection``; 206 when the group is not online
204         GET_PRODUCER_CONNECTION_LIST        ``ProducerConnection``
208         GET_CONSUME_STATS                   ``ConsumeStats`` (MessageQueue object keys)
300         QUERY_TOPIC_CONSUME_BY_WHO          ``GroupList``
43 / 45     GET_ALL_CONSUMER_OFFSET / DELAY     the offset tables as the Java config files hold them
200/201/207 subscription group create/list/delete
305         GET_SYSTEM_TOPIC_LIST_FROM_BROKER   ``TopicList`` of the system topics
307         GET_CONSUMER_RUNNING_INFO           relayed to the consumer's connection (``callConsumer``)
309         CONSUME_MESSAGE_DIRECTLY            the stored record of ``msgId`` relayed to the consumer
222         INVOKE_BROKER_TO_RESET_OFFSET       offsets by time pushed to the group's clients (220, oneway;
                                                ``Broker2Client.resetOffset``), the table answered
223         INVOKE_BROKER_TO_GET_CONSUMER_STATUS  each client's offsets of a topic (221 to every client,
                                                ``Broker2Client.getConsumeStatus``): ``GetConsumerStatusBody``
317         GET_BROKER_CONSUME_STATS            ``ConsumeStatsList``
321         QUERY_CONSUME_QUEUE                 ``QueryConsumeQueueResponseBody`` (rocketstream/broker/query_cq.py)
==========  ==================================  =============================================================

Codes the Java broker answers with 3 (``getUnknownCmdResponse``) are not registered here: 22, 23, 212
(``RESET_CONSUMER_OFFSET_IN_BROKER`` is in ``RequestCode`` but no 4.9.8 processor serves it) and 304 (a
name-server code).

Bodies are written with :mod:`rocketstream.remoting.json_body` as fastjson writes them: bean properties
sorted, nulls omitted, ``MessageQueue``-keyed maps with bare object keys
(``{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}``), integer-keyed maps with bare numbers. Java
writes ``HashMap``/``HashSet`` members in hash order; we write maps sorted and MessageQueue keys in
(topic, brokerName, queueId) order — a Java reader does not care.

The controller attributes used are the ones of the broker plan (``store``, ``topics``, ``offsets``,
``consumers``, ``producers``, ``subscription_groups``, ``schedule``, ``config``, ``broker_addr``) plus
``stats`` (:class:`rocketstream.broker.stats.BrokerStats`; :func:`register` attaches one when the
controller has none) and ``request_register()`` (re-register with the name servers after
``brokerPermission`` changes, as ``updateBrokerConfig`` does; topic changes are announced by the topic
manager itself, ``registerIncrementBrokerData``). Subscription groups: ``find_or_create``, ``update``,
``delete``, ``all``, ``data_version`` of the core's SubscriptionGroupManager.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from rocketstream.broker.query_cq import query_consume_queue
from rocketstream.broker.stats import BrokerStats
from rocketstream.codec import names
from rocketstream.codec.fastjson import FrozenObject
from rocketstream.codec.ids import decode_offset_msg_id
from rocketstream.errors import (
    BodyError,
    HeaderFieldError,
    OptionError,
    RemotingError,
    RemotingTimeoutError,
    StoreConfigError,
)
from rocketstream.remoting import json_body as _json
from rocketstream.remoting.channel import Channel
from rocketstream.remoting.codes import LanguageCode, RequestCode, ResponseCode, Version
from rocketstream.remoting.command import RemotingCommand
from rocketstream.store.meta.config import parse_properties

__all__ = [
    "AdminProcessor", "register", "MessageQueueKey", "SYSTEM_TOPICS", "system_topics", "validate_topic",
    "human_readable_bytes", "disk_used_ratio", "config_properties",
]

log = logging.getLogger("rocketstream.broker.admin")

# TopicValidator's static SYSTEM_TOPIC_SET; TopicConfigManager adds the cluster name, the broker name and
# "<cluster>_REPLY_TOPIC" at start (system_topics()).
SYSTEM_TOPICS = frozenset({
    "TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRACE_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
})
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
TOPIC_MAX_LENGTH = names.TOPIC_MAX_LENGTH
TOPIC_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")
# AdminBrokerProcessor.initConfigBlackList: these two plus BrokerConfig.configBlackList
# (default "configBlackList;brokerConfigPath")
CONFIG_BLACK_LIST = frozenset({"brokerConfigPath", "rocketmqHome", "configBlackList"})
MAX_TOPIC_QUEUE_NUMS = 1024      # BrokerConfig.max_topic_queue_nums's default, for controllers without one
# UPDATE_BROKER_CONFIG: the settings read on every request (the rest are read once, at start)
RUNTIME_SETTINGS = frozenset({
    "autoCreateTopicEnable", "autoCreateSubscriptionGroup", "longPollingEnable", "shortPollingTimeMills",
    "brokerPermission", "notifyConsumerIdsChangedEnable", "channelExpiredTimeout", "enablePropertyFilter",
    "regionId", "maxTopicQueueNums", "maxPullSuspendTimeMills", "topicConfigFlushDelayMills",
})
LOOP_SLICE_S = 0.005             # admin work walking queues gives the loop back this often
CALL_CONSUMER_TIMEOUT_S = 10.0   # Broker2Client.callClient: invokeSync(channel, request, 10000)
V3_1_8_SNAPSHOT = 62             # MQVersion.Version.V3_1_8_SNAPSHOT.ordinal(): callConsumer's minimum
NOT_SET_REMARK = "not set any response code"   # RemotingCommand.createResponseCommand(Class) leaves it
VERSION_DESC = "V4_9_8"

# SubscriptionGroupConfig's properties with their Java defaults (JSON name, snake_case attribute, default)
SUBSCRIPTION_GROUP_FIELDS: tuple[tuple[str, str, object], ...] = (
    ("brokerId", "broker_id", 0),
    ("consumeBroadcastEnable", "consume_broadcast_enable", True),
    ("consumeEnable", "consume_enable", True),
    ("consumeFromMinEnable", "consume_from_min_enable", True),
    ("groupName", "group_name", None),
    ("notifyConsumerIdsChangedEnable", "notify_consumer_ids_changed_enable", True),
    ("retryMaxTimes", "retry_max_times", 16),
    ("retryQueueNums", "retry_queue_nums", 1),
    ("whichBrokerWhenConsumeSlowly", "which_broker_when_consume_slowly", 1),
)


class MessageQueueKey(FrozenObject):
    """A ``MessageQueue`` as a map key: written by json_body as the bare object fastjson writes; its
    ``str`` orders keys by (topic, brokerName, queueId)."""

    __slots__ = ("_order",)

    def __init__(self, topic: str, broker_name: str, queue_id: int) -> None:
        super().__init__({"brokerName": broker_name, "queueId": queue_id, "topic": topic})
        self._order = f"{topic}\x00{broker_name}\x00{queue_id:011d}"

    def __str__(self) -> str:
        return self._order


def system_topics(cluster: str, broker_name: str) -> set[str]:
    return set(SYSTEM_TOPICS) | {cluster, broker_name, f"{cluster}_REPLY_TOPIC"}


def validate_topic(topic: str) -> str | None:
    """``TopicValidator.validateTopic`` (codec/names.py): the remark of the SYSTEM_ERROR answer, or None
    when valid."""
    return names.topic_problem(topic)


def human_readable_bytes(n: int) -> str:
    """``MixAll.humanReadableByteCount(bytes, false)``: "0 B", "512 B", "4.0 KiB", "252.0 GiB"."""
    if n < 1024:
        return f"{n} B"
    exp = 0
    v = float(n)
    while v >= 1024 and exp < 6:
        v /= 1024
        exp += 1
    return f"{n / 1024 ** exp:.1f} {'KMGTPE'[exp - 1]}iB"


def disk_used_ratio(path: Path) -> float:
    """``UtilAll.getDiskPartitionSpaceUsedPercent``: used/(used+usable), rounded up to 1/100; -1 when
    ``path`` does not exist."""
    try:
        st = os.statvfs(path)
    except FileNotFoundError:
        return -1.0
    total = st.f_blocks * st.f_frsize
    if total <= 0:
        return -1.0
    used = total - st.f_bfree * st.f_frsize
    entire = used + st.f_bavail * st.f_frsize
    if entire <= 0:
        return -1.0
    result = used * 100 // entire + (1 if used * 100 % entire else 0)
    return result / 100.0


# snake_case fields whose RocketMQ property name is not their plain camelCase
_PROPERTY_NAMES = {
    "broker_ip1": "brokerIP1", "broker_ip2": "brokerIP2", "check_crc_on_recover": "checkCRCOnRecover",
    "compress_msg_body_over": "compressMsgBodyOverHowmuch", "file_reserved_time_hours": "fileReservedTime",
}


# dataclass fields that are bookkeeping, not RocketMQ properties
_NOT_PROPERTIES = frozenset({"conf_path", "store_config", "layout_settings", "delay_levels_ms"})


def _camel(name: str) -> str:
    if name in _PROPERTY_NAMES:
        return _PROPERTY_NAMES[name]
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _prop_value(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float, Path)):
        return str(value)
    return None   # structured values (tuples, host objects) have no single property form


def config_properties(*configs: object) -> dict[str, str]:
    """The ``name=value`` pairs ``GET_BROKER_CONFIG`` lists: ``to_properties()`` of each config object
    when it has one, else its dataclass fields in RocketMQ's camelCase (earlier objects win)."""
    out: dict[str, str] = {}
    for config in configs:
        if config is None:
            continue
        to_props = getattr(config, "to_properties", None)
        if callable(to_props):
            items: Iterable[tuple[str, object]] = dict(to_props()).items()
        elif dataclasses.is_dataclass(config):
            items = ((_camel(f.name), getattr(config, f.name)) for f in dataclasses.fields(config)
                     if not f.name.startswith("_") and f.name not in _NOT_PROPERTIES)
        else:
            continue
        for key, value in items:
            text = _prop_value(value)
            if text is not None and key not in out:
                out[key] = text
    return out


def _data_version_json(dv: object) -> dict[str, int]:
    """``DataVersion`` as JSON: a ``to_json()`` object, a mapping, or an object with counter/timestamp."""
    if dv is None:
        return {"counter": 0, "timestamp": 0}
    to_json = getattr(dv, "to_json", None)
    if callable(to_json):
        return dict(to_json())
    if isinstance(dv, Mapping):
        return {"counter": int(dv.get("counter", 0)), "timestamp": int(dv.get("timestamp", 0))}
    return {"counter": int(getattr(dv, "counter", 0)), "timestamp": int(getattr(dv, "timestamp", 0))}


def topic_config_json(tc: Any) -> dict[str, object]:
    """``TopicConfig`` as fastjson writes it (its ``to_json()`` when it has one)."""
    to_json = getattr(tc, "to_json", None)
    if callable(to_json):
        return dict(to_json())
    return {
        "order": bool(getattr(tc, "order", False)),
        "perm": int(tc.perm),
        "readQueueNums": int(tc.read_queue_nums),
        "topicFilterType": str(getattr(tc, "topic_filter_type", "SINGLE_TAG")),
        "topicName": tc.topic_name,
        "topicSysFlag": int(getattr(tc, "topic_sys_flag", 0)),
        "writeQueueNums": int(tc.write_queue_nums),
    }


def subscription_group_json(cfg: Any, name: str) -> dict[str, object]:
    to_json = getattr(cfg, "to_json", None)
    if callable(to_json):
        return dict(to_json())
    out: dict[str, object] = {}
    for key, attr, default in SUBSCRIPTION_GROUP_FIELDS:
        out[key] = getattr(cfg, attr, default)
    if out["groupName"] is None:
        out["groupName"] = name
    return out


def subscription_data_json(sd: Any) -> dict[str, object]:
    """``SubscriptionData`` (``filterClassSource`` is transient; ``classFilterMode`` is always false here)."""
    return {
        "classFilterMode": bool(getattr(sd, "class_filter_mode", False)),
        "codeSet": sorted(int(c) for c in (getattr(sd, "code_set", None) or ())),
        "expressionType": getattr(sd, "expression_type", None) or "TAG",
        "subString": sd.sub_string,
        "subVersion": int(sd.sub_version),
        "tagsSet": sorted(str(t) for t in (getattr(sd, "tags_set", None) or ())),
        "topic": sd.topic,
    }


def _language(value: object) -> str:
    if isinstance(value, int):
        return LanguageCode.name(value) or "OTHER"
    return str(value)


def _connection_json(info: Any) -> dict[str, object]:
    """``Connection``: clientAddr is the channel's remote address (``parseChannelRemoteAddr``)."""
    channel = getattr(info, "channel", None)
    return {"clientAddr": getattr(channel, "addr", "") if channel is not None else "",
            "clientId": info.client_id, "language": _language(info.language), "version": int(info.version)}


class AdminProcessor:
    """The handlers; ``controller`` is a BrokerController (see the module docstring for what is used)."""

    def __init__(self, controller: Any) -> None:
        self.c = controller
        if getattr(controller, "stats", None) is None:
            controller.stats = BrokerStats()
        self.config_version = {"counter": 0, "timestamp": time.time_ns() // 1_000_000}   # Configuration.dataVersion
        self._background: set[asyncio.Task] = set()
        self.handlers: dict[int, Callable[[Channel, RemotingCommand], Any]] = {
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.update_and_create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: self.get_all_topic_config,
            RequestCode.UPDATE_BROKER_CONFIG: self.update_broker_config,
            RequestCode.GET_BROKER_CONFIG: self.get_broker_config,
            RequestCode.GET_BROKER_RUNTIME_INFO: self.get_broker_runtime_info,
            RequestCode.GET_TOPIC_STATS_INFO: self.get_topic_stats_info,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.get_consumer_connection_list,
            RequestCode.GET_PRODUCER_CONNECTION_LIST: self.get_producer_connection_list,
            RequestCode.GET_CONSUME_STATS: self.get_consume_stats,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self.query_topic_consume_by_who,
            RequestCode.GET_ALL_CONSUMER_OFFSET: self.get_all_consumer_offset,
            RequestCode.GET_ALL_DELAY_OFFSET: self.get_all_delay_offset,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_and_create_subscription_group,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.get_all_subscription_group,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete_subscription_group,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER: self.get_system_topic_list,
            RequestCode.GET_CONSUMER_RUNNING_INFO: self.get_consumer_running_info,
            RequestCode.CONSUME_MESSAGE_DIRECTLY: self.consume_message_directly,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self.invoke_broker_to_reset_offset,
            RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS: self.invoke_broker_to_get_consumer_status,
            RequestCode.GET_BROKER_CONSUME_STATS: self.get_broker_consume_stats,
            RequestCode.QUERY_CONSUME_QUEUE: self.query_consume_queue,
        }

    # ------------------------------------------------------------------------------- helpers
    @property
    def broker_name(self) -> str:
        return str(self.c.config.broker_name)

    def _system_topics(self) -> set[str]:
        return system_topics(str(self.c.config.broker_cluster_name), self.broker_name)

    def _is_system_topic(self, topic: str) -> bool:
        return topic in self._system_topics() or topic.startswith(SYSTEM_TOPIC_PREFIX)

    def _mq(self, topic: str, queue_id: int) -> MessageQueueKey:
        return MessageQueueKey(topic, self.broker_name, queue_id)

    def store_time_at(self, topic: str, queue_id: int, offset: int) -> int:
        """``getMessageStoreTimeStamp(topic, queueId, offset)``: the store time of the message at that
        queue offset, -1 when the queue does not hold it."""
        store = self.c.store
        if offset < store.min_offset(topic, queue_id) or offset >= store.max_offset(topic, queue_id):
            return -1
        # getIndexBuffer + pickupStoreTimestamp: the unit is not checked against its record (a check per
        # queue made GET_TOPIC_STATS_INFO of 1,024 queues take seconds)
        units = store.peek_cq_units(topic, queue_id, offset, offset + 1)
        if len(units) == 0:
            return -1
        return int(store.commit_log.store_timestamp_at(int(units[0]["offset"])))

    def _register_now(self) -> None:
        """``registerBrokerAll``: tell the name servers at once (after ``brokerPermission`` changed)."""
        register = getattr(self.c, "request_register", None)
        if not callable(register):
            return
        result = register()
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            self._background.add(task)
            task.add_done_callback(self._registered)

    def _registered(self, task: asyncio.Task) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("registering with the name server after a config change failed",
                      exc_info=task.exception())

    def _group_info(self, group: str) -> Any:
        return self.c.consumers.group_info(group)

    def _find_subscription(self, group: str, topic: str) -> tuple[Any, int]:
        """(``findSubscriptionData``, ``findSubscriptionDataCount``) of a group."""
        info = self._group_info(group)
        if info is None:
            return None, 0
        subs = info.subscriptions
        return subs.get(topic), len(subs)

    # ------------------------------------------------------------------------------- topics
    def update_and_create_topic(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        topic = req.field("topic")
        req.field("defaultTopic")
        read_q = req.int_field("readQueueNums")
        write_q = req.int_field("writeQueueNums")
        perm = req.int_field("perm")
        filter_type = req.field("topicFilterType")
        sys_flag = req.int_field("topicSysFlag", required=False, default=0)
        req.field("order")   # @CFNotNull, but updateAndCreateTopic never reads it (order comes from the namesrv)
        if filter_type not in TOPIC_FILTER_TYPES:
            raise HeaderFieldError("topicFilterType", f"is not a TopicFilterType: {filter_type[:40]!r}")
        for name, value in (("readQueueNums", read_q), ("writeQueueNums", write_q), ("perm", perm)):
            if value < 0:
                raise HeaderFieldError(name, f"is negative: {value}")
        remark = validate_topic(topic)
        if remark is not None:
            return req.response(ResponseCode.SYSTEM_ERROR, remark)
        if self._is_system_topic(topic):
            return req.response(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
        cap = int(getattr(self.c.config, "max_topic_queue_nums", MAX_TOPIC_QUEUE_NUMS))
        for name, value in (("readQueueNums", read_q), ("writeQueueNums", write_q)):
            if value > cap:   # GET_TOPIC_STATS_INFO and the planners walk every queue
                return req.response(ResponseCode.SYSTEM_ERROR,
                                    f"{name} {value} is over the broker's maxTopicQueueNums {cap}")
        self.c.topics.create(topic, read_q, write_q, perm, sys_flag)
        log.info("updateAndCreateTopic %s read=%d write=%d perm=%d by %s", topic, read_q, write_q, perm,
                 channel.addr)
        return req.response(ResponseCode.SUCCESS, NOT_SET_REMARK)

    def delete_topic(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """The topic config goes; its consume queues and messages stay in the store (the Java broker's
        ``cleanUnusedTopic`` deletes the queue files; our store has no such operation)."""
        topic = req.field("topic")
        remark = validate_topic(topic)
        if remark is not None and self.c.topics.get(topic) is None:   # one the table holds goes, legal or not
            return req.response(ResponseCode.SYSTEM_ERROR, remark)
        if self._is_system_topic(topic):
            return req.response(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
        if self.c.topics.get(topic) is not None:
            self.c.topics.delete(topic)
            log.info("deleteTopic %s by %s", topic, channel.addr)
        return req.response(ResponseCode.SUCCESS)

    def get_all_topic_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        table = {name: topic_config_json(tc) for name, tc in self.c.topics.all().items()}
        body = {"dataVersion": _data_version_json(getattr(self.c.topics, "data_version", None)),
                "topicConfigTable": table}
        return req.response(ResponseCode.SUCCESS, fields={}, body=_json.dumps(body))

    def _over_cap(self, req: RemotingCommand, topic: str, nums: int) -> RemotingCommand | None:
        """A topic kept before queue counts were bounded may have more queues than ``maxTopicQueueNums``:
        its per-queue answers are refused (walking 2·10⁹ queues is no answer), naming the setting."""
        cap = int(getattr(self.c.config, "max_topic_queue_nums", MAX_TOPIC_QUEUE_NUMS))
        if nums <= cap:
            return None
        return req.response(ResponseCode.SYSTEM_ERROR,
                            f"topic[{topic}] has {nums} queues, over the broker's maxTopicQueueNums {cap}: "
                            "update the topic with fewer queues")

    async def get_topic_stats_info(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """``TopicStatsTable``; computed in slices of the loop's time (:class:`LoopSlicer`), so other
        requests are answered while a topic of many queues is walked."""
        topic = req.field("topic")
        tc = self.c.topics.get(topic)
        if tc is None:
            return req.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        nums = int(tc.write_queue_nums)
        refused = self._over_cap(req, topic, nums)
        if refused is not None:
            return refused
        store = self.c.store
        # The body json_body writes for {"offsetTable": {MessageQueueKey: {...}}} (keys in queue-id order),
        # composed here: a planner asks for a thousand queues every trigger.
        head = '{"brokerName":' + _json.dumps(self.broker_name).decode("utf-8", "surrogatepass") + ',"queueId":'
        tail = ',"topic":' + _json.dumps(topic).decode("utf-8", "surrogatepass") + '}:{"lastUpdateTimestamp":'
        entries = []
        slicer = LoopSlicer()
        for qid in range(nums):
            await slicer.maybe_yield()
            lo = max(store.min_offset(topic, qid), 0)
            hi = max(store.max_offset(topic, qid), 0)
            ts = self.store_time_at(topic, qid, hi - 1) if hi > 0 else 0
            entries.append(f'{head}{qid}{tail}{ts},"maxOffset":{hi},"minOffset":{lo}}}')
        body = '{"offsetTable":{' + ",".join(entries) + "}}"
        return req.response(ResponseCode.SUCCESS, body=body.encode("utf-8", "surrogatepass"))

    def get_system_topic_list(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        return req.response(ResponseCode.SUCCESS, body=_json.dumps({"topicList": sorted(self._system_topics())}))

    # ------------------------------------------------------------------------------- broker config
    def _config_objects(self) -> tuple[object, ...]:
        store = getattr(self.c, "store", None)
        return (self.c.config, getattr(store, "config", None))

    def update_broker_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """``Configuration.update``: only properties the configuration already has are taken
        (``mergeIfExist``: unknown names are ignored); values are converted to the field's type. In memory
        only: the broker.conf file is not rewritten.

        Only the settings the broker reads while it runs (:data:`RUNTIME_SETTINGS`) change; a request that
        names another known setting (``storePathRootDir``, ``flushDiskType``, ``aclEnable``, ...: read once at
        start) is refused whole, SYSTEM_ERROR naming them, so GET_BROKER_CONFIG shows the config in force.
        A value the setting refuses (BrokerConfig's checks) is refused the same way."""
        if req.body is None:
            return req.response(ResponseCode.SUCCESS)
        try:
            props = parse_properties(req.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            log.error("updateBrokerConfig: string2Properties error: %s", exc)
            return req.response(ResponseCode.SYSTEM_ERROR, "string2Properties error")
        black = set(CONFIG_BLACK_LIST)
        black.update(p for p in str(getattr(self.c.config, "config_black_list", "")).split(";") if p)
        if black & set(props):
            return req.response(ResponseCode.NO_PERMISSION, "Can not update config in black list.")
        known = config_properties(*self._config_objects())
        fixed = sorted(k for k in props if k in known and k not in RUNTIME_SETTINGS)
        if fixed:
            return req.response(ResponseCode.SYSTEM_ERROR,
                                f"these settings cannot change while the broker runs (set them in broker.conf and "
                                f"restart): {', '.join(fixed)}")
        props = {k: v for k, v in props.items() if k in RUNTIME_SETTINGS}
        updater = getattr(self.c.config, "update_properties", None)
        try:
            if callable(updater):
                updater(props)
            else:
                self._set_config_fields(self.c.config, props)
        except StoreConfigError as exc:
            return req.response(ResponseCode.SYSTEM_ERROR, f"updateBrokerConfig: {exc}")
        self.config_version = {"counter": self.config_version["counter"] + 1,
                               "timestamp": time.time_ns() // 1_000_000}
        log.info("updateBrokerConfig %s by %s", props, channel.addr)
        if "brokerPermission" in props:
            self._register_now()
        return req.response(ResponseCode.SUCCESS)

    @staticmethod
    def _set_config_fields(config: object, props: Mapping[str, str]) -> None:
        """``MixAll.properties2Object``: a property whose setter argument does not parse is skipped. The
        values are checked together first (the dataclass's own checks on a copy: StoreConfigError), then
        set on ``config`` itself (the broker's parts share that object)."""
        if not dataclasses.is_dataclass(config):
            return
        by_camel = {_camel(f.name): f.name for f in dataclasses.fields(config)}
        changes: dict[str, object] = {}
        for key, raw in props.items():
            attr = by_camel.get(key)
            if attr is None:
                continue
            current = getattr(config, attr)
            value: object
            try:
                if isinstance(current, bool):
                    value = raw.strip().lower() == "true"
                elif isinstance(current, int):
                    value = int(raw.strip())
                elif isinstance(current, float):
                    value = float(raw.strip())
                elif isinstance(current, Path):
                    value = Path(raw)
                elif isinstance(current, str) or current is None:
                    value = raw
                else:
                    continue
            except ValueError:
                log.warning("updateBrokerConfig: %s=%r does not parse as %s; kept %r", key, raw,
                            type(current).__name__, current)
                continue
            changes[attr] = value
        if not changes:
            return
        dataclasses.replace(config, **changes)  # type: ignore[type-var]  # __post_init__'s checks
        for attr, value in changes.items():
            object.__setattr__(config, attr, value)

    def get_broker_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """``Configuration.getAllConfigsFormatString``: ``key=value\\n`` per property; header ``version``
        is the configuration's DataVersion JSON."""
        props = config_properties(*self._config_objects())
        text = "".join(f"{k}={v}\n" for k, v in props.items())
        version = _json.dumps(self.config_version).decode()
        return req.response(ResponseCode.SUCCESS, fields={"version": version}, body=text.encode("utf-8"))

    # ------------------------------------------------------------------------------- runtime info
    def runtime_info(self) -> dict[str, str]:
        """``prepareRuntimeInfo`` + ``DefaultMessageStore.getRuntimeInfo`` + ``StoreStatsService``:
        the keys we have real values for (see the report in docs for the ones left out)."""
        store = self.c.store
        stats: BrokerStats = self.c.stats
        now_ms = time.time_ns() // 1_000_000
        root = Path(store.root)
        commitlog_dir = root / "commitlog"
        ratio = disk_used_ratio(commitlog_dir if commitlog_dir.exists() else root)
        info: dict[str, str] = {
            "brokerVersionDesc": VERSION_DESC,
            "brokerVersion": str(Version.V4_9_8),
            # BrokerStats: counters since boot; the "morning" snapshots are taken at midnight by the Java
            # broker's BrokerStats.record(); we keep none, so they stay 0 as on a broker booted today
            "msgPutTotalYesterdayMorning": "0",
            "msgPutTotalTodayMorning": "0",
            "msgPutTotalTodayNow": str(stats.put.total),
            "msgGetTotalYesterdayMorning": "0",
            "msgGetTotalTodayMorning": "0",
            "msgGetTotalTodayNow": str(stats.get.total),
            # requests run on the event loop: no executor queues, nothing waits in one
            "sendThreadPoolQueueSize": "0",
            "pullThreadPoolQueueSize": "0",
            "queryThreadPoolQueueSize": "0",
            "sendThreadPoolQueueHeadWaitTimeMills": "0",
            "pullThreadPoolQueueHeadWaitTimeMills": "0",
            "queryThreadPoolQueueHeadWaitTimeMills": "0",
            "dispatchBehindBytes": "0",   # dispatch happens inside put
            "pageCacheLockTimeMills": "0",   # no put lock held across requests
            "earliestMessageTimeStamp": str(self._earliest_message_time()),
            "startAcceptSendRequestTimeStamp": "0",
            "commitLogMinOffset": str(store.commit_log_min_offset()),
            "commitLogMaxOffset": str(store.commit_log_max_offset()),
            "commitLogDiskRatio": str(ratio),
            f"commitLogDiskRatio_{commitlog_dir}": str(ratio),
            "consumeQueueDiskRatio": str(disk_used_ratio(root / "consumequeue" if (root / "consumequeue").exists()
                                                         else root)),
            "bootTimestamp": str(stats.boot_ms),
            "runtime": _runtime_text(now_ms - stats.boot_ms),
            "putMessageTimesTotal": str(stats.put_times),
            "putMessageSizeTotal": str(stats.put_bytes),
            "putMessageAverageSize": repr(stats.put_bytes / stats.put.total if stats.put.total else 0.0),
            "putMessageFailedTimes": str(stats.put_failed_times),
            "putTps": BrokerStats.tps_triple(stats.put),
            "getTransferedTps": BrokerStats.tps_triple(stats.get),
        }
        try:
            st = os.statvfs(root)
            info["commitLogDirCapacity"] = (f"Total : {human_readable_bytes(st.f_blocks * st.f_frsize)}, "
                                            f"Free : {human_readable_bytes(st.f_bavail * st.f_frsize)}.")
        except FileNotFoundError:
            pass   # Java: only when the store directory exists
        return info

    def _earliest_message_time(self) -> int:
        """``getEarliestMessageTime()``: store time of the first record in the commit log, -1 when none."""
        store = self.c.store
        lo = store.commit_log_min_offset()
        if store.commit_log_max_offset() <= lo:
            return -1
        return int(store.commit_log.store_timestamp_at(lo))

    def get_broker_runtime_info(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        return req.response(ResponseCode.SUCCESS, body=_json.dumps({"table": self.runtime_info()}))

    # ------------------------------------------------------------------------------- clients
    def get_consumer_connection_list(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        group = req.field("consumerGroup")
        info = self._group_info(group)
        if info is None:
            return req.response(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        body = {
            "connectionSet": [_connection_json(ci) for ci in info.channels.values()],
            "consumeFromWhere": info.consume_from_where,
            "consumeType": info.consume_type,
            "messageModel": info.message_model,
            "subscriptionTable": {t: subscription_data_json(sd) for t, sd in info.subscriptions.items()},
        }
        return req.response(ResponseCode.SUCCESS, body=_json.dumps(body))

    def get_producer_connection_list(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        group = req.field("producerGroup")
        producers = self.c.producers
        table = getattr(producers, "table", producers)   # ProducerManager.table: group -> {clientId: info}
        channels = table.get(group)
        if channels is None:
            return req.response(ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist")
        body = {"connectionSet": [_connection_json(ci) for ci in channels.values()]}
        return req.response(ResponseCode.SUCCESS, body=_json.dumps(body))

    async def get_consumer_running_info(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        group, client_id = req.field("consumerGroup"), req.field("clientId")
        return await self.call_consumer(RequestCode.GET_CONSUMER_RUNNING_INFO, req, group, client_id)

    async def consume_message_directly(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """``AdminBrokerProcessor.consumeMessageDirectly``: the stored record of the offset msgId as the body,
        this broker's name in ``brokerName``, relayed to the client (mqadmin ``queryMsgById -g -d``)."""
        group, client_id = req.field("consumerGroup"), req.field("clientId")
        msg_id = req.field("msgId")
        try:
            _, phys = decode_offset_msg_id(msg_id)
        except OptionError as exc:
            raise HeaderFieldError("msgId", f"not an offset message id: {exc}") from None
        raw = self.c.store.raw_record(phys)
        if raw is None:
            return req.response(ResponseCode.SYSTEM_ERROR, f"no message at commit-log offset {phys} (msgId {msg_id})")
        forward = RemotingCommand.request(RequestCode.CONSUME_MESSAGE_DIRECTLY, body=bytes(raw))
        forward.ext_fields = dict(req.ext_fields or {}, brokerName=self.broker_name)
        return await self._call_consumer_with(forward, req, group, client_id)

    def invoke_broker_to_reset_offset(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """``Broker2Client.resetOffset``: per write queue the offset at ``timestamp`` (-1: the max offset),
        kept at the committed offset unless ``isForce`` or earlier; sent to every client of the group as
        RESET_CONSUMER_CLIENT_OFFSET (oneway) and answered as ``ResetOffsetBody``."""
        topic, group = req.field("topic"), req.field("group")
        timestamp = req.int_field("timestamp")
        force = str(req.field("isForce", required=False) or "false").lower() == "true"
        tc = self.c.topics.get(topic)
        if tc is None:
            return req.response(ResponseCode.SYSTEM_ERROR,
                                f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}")
        refused = self._over_cap(req, topic, int(tc.write_queue_nums))
        if refused is not None:
            return refused
        table: dict[MessageQueueKey, int] = {}
        store = self.c.store
        for qid in range(tc.write_queue_nums):
            committed = self.c.offsets.query_offset(group, topic, qid)
            if committed == -1:
                return req.response(ResponseCode.SYSTEM_ERROR, f"THe consumer group <{group}> not exist")
            at = (store.max_offset(topic, qid) if timestamp == -1
                  else store.get_offset_in_queue_by_time(topic, qid, timestamp))
            at = max(at, 0)
            table[self._mq(topic, qid)] = at if force or at < committed else committed
        info = self._group_info(group)
        if info is None or not info.channels:
            return req.response(ResponseCode.CONSUMER_NOT_ONLINE,
                                f"Consumer not online, so can not reset offset, Group: {group} Topic: {topic} "
                                f"Timestamp: {timestamp}")
        body = _json.dumps({"offsetTable": table})
        push = RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                                       {"topic": topic, "group": group, "timestamp": timestamp}, body)
        for cci in list(info.channels.values()):
            self._spawn_oneway(cci.channel, push, f"reset offset of {topic} for {group} to {cci.client_id}")
        return req.response(ResponseCode.SUCCESS, body=body)

    async def invoke_broker_to_get_consumer_status(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """``Broker2Client.getConsumeStatus``: GET_CONSUMER_STATUS_FROM_CLIENT (221) to every client of the group
        (or only ``clientAddr``, the client id), their ``messageQueueTable`` by client id. A client that does
        not answer is left out (logged), as RocketMQ does."""
        topic, group = req.field("topic"), req.field("group")
        origin = req.field("clientAddr", required=False) or ""
        info = self._group_info(group)
        if info is None or not info.channels:
            return req.response(ResponseCode.SYSTEM_ERROR, f"No Any Consumer online in the consumer group: [{group}]")
        table: dict[str, object] = {}
        for cci in list(info.channels.values()):
            if origin and origin != cci.client_id:
                continue
            ask = RemotingCommand.request(RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, {"topic": topic, "group": group})
            try:
                answer = await cci.channel.invoke(ask, 5.0)
                if answer.code == ResponseCode.SUCCESS and answer.body:
                    doc = _json.loads(answer.body, what="GetConsumerStatusBody", addr=cci.channel.addr)
                    if isinstance(doc, Mapping):
                        table[cci.client_id] = doc.get("messageQueueTable") or {}
            except RemotingError as exc:
                log.error("[get-consumer-status] get consumer status exception. topic=%s, group=%s, error=%s",
                          topic, group, exc)
            if origin:
                break
        return req.response(ResponseCode.SUCCESS, body=_json.dumps({"consumerTable": table, "messageQueueTable": {}}))

    def _spawn_oneway(self, ch: Channel, cmd: RemotingCommand, what: str) -> None:
        async def send() -> None:
            try:
                await ch.invoke_oneway(cmd)
                log.info("[reset-offset] %s: sent", what)
            except RemotingError as exc:   # the client went away: it re-reads offsets when it comes back
                log.error("[reset-offset] %s failed: %s", what, exc)
        task = asyncio.get_running_loop().create_task(send())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def call_consumer(self, code: int, req: RemotingCommand, group: str, client_id: str) -> RemotingCommand:
        """``AdminBrokerProcessor.callConsumer``: forward the request (same extFields and body) to the
        consumer's connection and answer with what it answers."""
        forward = RemotingCommand.request(code, body=req.body)
        forward.ext_fields = dict(req.ext_fields or {})
        return await self._call_consumer_with(forward, req, group, client_id)

    async def _call_consumer_with(self, forward: RemotingCommand, req: RemotingCommand, group: str,
                                  client_id: str) -> RemotingCommand:
        info = self._group_info(group)
        cci = info.channels.get(client_id) if info is not None else None
        if cci is None:
            return req.response(ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online")
        if int(cci.version) < V3_1_8_SNAPSHOT:
            return req.response(ResponseCode.SYSTEM_ERROR,
                                f"The Consumer <{client_id}> Version <{cci.version}> too low to finish, "
                                "please upgrade it to V3_1_8_SNAPSHOT")
        try:
            answer = await cci.channel.invoke(forward, CALL_CONSUMER_TIMEOUT_S)
        except RemotingTimeoutError as exc:
            return req.response(ResponseCode.CONSUME_MSG_TIMEOUT, f"consumer <{group}> <{client_id}> Timeout: {exc}")
        except RemotingError as exc:
            return req.response(ResponseCode.SYSTEM_ERROR,
                                f"invoke consumer <{group}> <{client_id}> Exception: {exc}")
        resp = req.response(answer.code, answer.remark, body=answer.body)
        resp.ext_fields = answer.ext_fields
        return resp

    # ------------------------------------------------------------------------------- consumption
    def consume_stats(self, group: str, topics: Iterable[str], *, by_write_queues: bool = False,
                      order_only: bool = False) -> list[tuple[str, dict[str, object]]]:
        """Per topic: the ``ConsumeStats`` of ``group`` (``getConsumeStats`` loops over read queues,
        ``fetchAllConsumeStatsInBroker`` over write queues and may keep only order topics)."""
        store = self.c.store
        stats: BrokerStats = self.c.stats
        out = []
        for topic in sorted(topics):
            tc = self.c.topics.get(topic)
            if tc is None:
                log.warning("consumeStats, topic config not exist, %s", topic)
                continue
            if order_only and not getattr(tc, "order", False):
                continue
            sub, sub_count = self._find_subscription(group, topic)
            if sub is None and sub_count > 0:
                continue
            table: dict[object, object] = {}
            nums = tc.write_queue_nums if by_write_queues else tc.read_queue_nums
            cap = int(getattr(self.c.config, "max_topic_queue_nums", MAX_TOPIC_QUEUE_NUMS))
            if nums > cap:   # kept before queue counts were bounded: not walked (see _over_cap)
                log.warning("consumeStats, topic %s has %d queues, over maxTopicQueueNums %d: left out",
                            topic, nums, cap)
                continue
            for qid in range(int(nums)):
                broker_offset = max(store.max_offset(topic, qid), 0)
                consumer_offset = max(self.c.offsets.query_offset(group, topic, qid), 0)
                last = 0
                if consumer_offset - 1 >= 0:
                    ts = self.store_time_at(topic, qid, consumer_offset - 1)
                    if ts > 0:
                        last = ts
                table[self._mq(topic, qid)] = {"brokerOffset": broker_offset, "consumerOffset": consumer_offset,
                                               "lastTimestamp": last}
            out.append((topic, {"consumeTps": stats.group_get_tps(group, topic), "offsetTable": table}))
        return out

    def get_consume_stats(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        group = req.field("consumerGroup")
        topic = req.field("topic", required=False)
        topics = self.c.offsets.topics_of_group(group) if topic is None or not topic.strip() else {topic}
        merged: dict[object, object] = {}
        tps = 0.0
        for _, cs in self.consume_stats(group, topics):
            merged.update(cs["offsetTable"])   # type: ignore[call-overload]
            tps += cs["consumeTps"]            # type: ignore[operator]
        return req.response(ResponseCode.SUCCESS, body=_json.dumps({"consumeTps": tps, "offsetTable": merged}))

    def get_broker_consume_stats(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """``fetchAllConsumeStatsInBroker``: every subscription group's stats over write queues."""
        order_only = bool(req.bool_field("isOrder", default=False))
        if req.field("isOrder", required=False) is None:
            raise HeaderFieldError("isOrder", "is null")
        stats_list: list[dict[str, object]] = []
        total_diff = 0
        for group in self.c.subscription_groups.all():
            per_topic = self.consume_stats(group, self.c.offsets.topics_of_group(group), by_write_queues=True,
                                           order_only=order_only)
            for _, cs in per_topic:
                table: Mapping[object, Mapping[str, int]] = cs["offsetTable"]   # type: ignore[assignment]
                total_diff += sum(w["brokerOffset"] - w["consumerOffset"] for w in table.values())
            stats_list.append({group: [cs for _, cs in per_topic]})
        body = {"brokerAddr": self.c.broker_addr, "consumeStatsList": stats_list, "totalDiff": total_diff}
        return req.response(ResponseCode.SUCCESS, body=_json.dumps(body))

    def query_topic_consume_by_who(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        topic = req.field("topic")
        groups = set(self.c.consumers.groups_of_topic(topic)) | set(self.c.offsets.groups_of_topic(topic))
        return req.response(ResponseCode.SUCCESS, body=_json.dumps({"groupList": sorted(groups)}))

    def get_all_consumer_offset(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """``ConsumerOffsetManager.encode()``: ``{"offsetTable":{"topic@group":{0:5,...}}}``."""
        table = {key: {int(q): int(o) for q, o in queues.items()} for key, queues in self.c.offsets.table().items()}
        return req.response(ResponseCode.SUCCESS, body=_json.dumps({"offsetTable": table}))

    def get_all_delay_offset(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """``ScheduleMessageService.encode()``: ``{"offsetTable":{1:0,...}}`` (delay level -> offset)."""
        schedule = self.c.schedule
        offsets = schedule.offset_table() if schedule is not None else {}   # no schedule service: nothing delayed
        table = {int(level): int(off) for level, off in offsets.items()}
        return req.response(ResponseCode.SUCCESS, body=_json.dumps({"offsetTable": table}))

    def query_consume_queue(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        def subscription(group: str, topic: str) -> dict[str, object] | None:
            sd = self._find_subscription(group, topic)[0]
            return None if sd is None else subscription_data_json(sd)

        return query_consume_queue(self.c, subscription, req)

    # ------------------------------------------------------------------------------- subscription groups
    def update_and_create_subscription_group(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """``SubscriptionGroupConfig`` JSON in the body; an absent body changes nothing (as in Java)."""
        if req.body:
            doc = _json.loads(req.body, what="SubscriptionGroupConfig", addr=channel.addr)
            if not isinstance(doc, Mapping):
                raise BodyError("SubscriptionGroupConfig is not a JSON object", addr=channel.addr)
            name = doc.get("groupName")
            if not isinstance(name, str) or not name:
                raise BodyError("SubscriptionGroupConfig: groupName is missing or not a string", addr=channel.addr)
            problem = names.group_problem(name)
            if problem is not None:
                raise BodyError(f"SubscriptionGroupConfig: groupName: {problem}", addr=channel.addr)
            fields: dict[str, object] = {}
            for key, attr, default in SUBSCRIPTION_GROUP_FIELDS:
                if key == "groupName":
                    continue
                value = doc.get(key, default)
                if value is None:
                    value = default
                if isinstance(default, bool):
                    if isinstance(value, str):
                        value = value.lower() == "true"
                    elif not isinstance(value, bool):
                        raise BodyError(f"SubscriptionGroupConfig: {key} is not a boolean: {value!r:.40}")
                else:
                    if isinstance(value, bool) or not isinstance(value, (int, str)):
                        raise BodyError(f"SubscriptionGroupConfig: {key} is not an integer: {value!r:.40}")
                    try:
                        value = int(value)
                    except ValueError:
                        raise BodyError(f"SubscriptionGroupConfig: {key} is not an integer: {value!r:.40}") from None
                fields[attr] = value
            cap = int(getattr(self.c.config, "max_topic_queue_nums", MAX_TOPIC_QUEUE_NUMS))
            retry_queues = fields.get("retry_queue_nums", 1)
            assert isinstance(retry_queues, int)
            if retry_queues > cap:   # the %RETRY% topic gets this many queues
                raise BodyError(f"SubscriptionGroupConfig: retryQueueNums {retry_queues} is over the broker's "
                                f"maxTopicQueueNums {cap}", addr=channel.addr)
            groups = self.c.subscription_groups
            current = groups.find_or_create(name, True)
            groups.update(dataclasses.replace(current, **fields))
            log.info("updateAndCreateSubscriptionGroup %s by %s", name, channel.addr)
        return req.response(ResponseCode.SUCCESS)

    def get_all_subscription_group(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        groups = self.c.subscription_groups
        body = {"dataVersion": _data_version_json(getattr(groups, "data_version", None)),
                "subscriptionGroupTable": {name: subscription_group_json(cfg, name)
                                           for name, cfg in groups.all().items()}}
        return req.response(ResponseCode.SUCCESS, body=_json.dumps(body))

    def delete_subscription_group(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        group = req.field("groupName")
        remove_offset = bool(req.bool_field("removeOffset", default=False))
        self.c.subscription_groups.delete(group)
        if remove_offset:
            self.c.offsets.remove_offset(group)
        log.info("deleteSubscriptionGroup %s (removeOffset=%s) by %s", group, remove_offset, channel.addr)
        return req.response(ResponseCode.SUCCESS)


class LoopSlicer:
    """Long admin work on the event loop in slices: :meth:`maybe_yield` gives the loop back once
    ``slice_s`` has passed since the last time, so a control request waits at most about one slice."""

    def __init__(self, slice_s: float = LOOP_SLICE_S) -> None:
        self.slice_s = slice_s
        self._since = time.perf_counter()

    async def maybe_yield(self) -> None:
        if time.perf_counter() - self._since >= self.slice_s:
            await asyncio.sleep(0)
            self._since = time.perf_counter()


def _runtime_text(ms: int) -> str:
    """``StoreStatsService.getFormatRuntime``: ``[ 0 days, 0 hours, 0 minutes, 27 seconds ]``."""
    s = max(ms, 0) // 1000
    return f"[ {s // 86400} days, {s // 3600 % 24} hours, {s // 60 % 60} minutes, {s % 60} seconds ]"


def register(controller: Any) -> AdminProcessor:
    """Register the admin codes on ``controller.server``; the processor is returned (tests use it)."""
    processor = AdminProcessor(controller)
    for code, handler in processor.handlers.items():
        controller.server.register(code, handler)
    return processor
