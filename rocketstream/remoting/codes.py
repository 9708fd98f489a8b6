"""Request, response and language codes with the names RocketMQ 4.9.8 gives them.

``RequestCode`` mirrors ``org.apache.rocketmq.common.protocol.RequestCode``, ``ResponseCode`` mirrors
``RemotingSysResponseCode`` (0-4) plus ``org.apache.rocketmq.common.protocol.ResponseCode``, and
``LanguageCode`` mirrors ``org.apache.rocketmq.remoting.protocol.LanguageCode`` (docs/remoting-protocol.md).
Codes stay plain ``int``s on the wire: a peer may send a code we have no name for.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = ["RequestCode", "ResponseCode", "LanguageCode", "Version", "code_name"]


class _Codes:
    """Integer constants plus a reverse lookup (``name(105) == "GET_ROUTEINFO_BY_TOPIC"``)."""

    _names: ClassVar[dict[int, str]]   # built by names() on first use, per subclass

    @classmethod
    def names(cls) -> dict[int, str]:
        table = cls.__dict__.get("_names")
        if table is None:
            table = {v: k for k, v in vars(cls).items() if k.isupper() and isinstance(v, int)}
            cls._names = table
        return table

    @classmethod
    def name(cls, code: int) -> str | None:
        return cls.names().get(code)


class RequestCode(_Codes):
    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_BROKER_OFFSET = 13
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    GET_TOPIC_CONFIG_LIST = 22
    GET_TOPIC_NAME_LIST = 23
    UPDATE_BROKER_CONFIG = 25
    GET_BROKER_CONFIG = 26
    TRIGGER_DELETE_FILES = 27
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ALL_DELAY_OFFSET = 45
    CHECK_CLIENT_CONFIG = 46
    UPDATE_AND_CREATE_ACL_CONFIG = 50
    DELETE_ACL_CONFIG = 51
    GET_BROKER_CLUSTER_ACL_INFO = 52
    UPDATE_GLOBAL_WHITE_ADDRS_CONFIG = 53
    GET_BROKER_CLUSTER_ACL_CONFIG = 54
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_PRODUCER_CONNECTION_LIST = 204
    WIPE_WRITE_PERM_OF_BROKER = 205
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    SUSPEND_CONSUMER = 209
    RESUME_CONSUMER = 210
    RESET_CONSUMER_OFFSET_IN_CONSUMER = 211
    RESET_CONSUMER_OFFSET_IN_BROKER = 212
    ADJUST_CONSUMER_THREAD_POOL = 213
    WHO_CONSUME_THE_MESSAGE = 214
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    GET_KVLIST_BY_NAMESPACE = 219
    RESET_CONSUMER_CLIENT_OFFSET = 220
    GET_CONSUMER_STATUS_FROM_CLIENT = 221
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    INVOKE_BROKER_TO_GET_CONSUMER_STATUS = 223
    GET_TOPICS_BY_CLUSTER = 224
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    REGISTER_FILTER_SERVER = 301
    REGISTER_MESSAGE_FILTER_CLASS = 302
    QUERY_CONSUME_TIME_SPAN = 303
    GET_SYSTEM_TOPIC_LIST_FROM_NS = 304
    GET_SYSTEM_TOPIC_LIST_FROM_BROKER = 305
    CLEAN_EXPIRED_CONSUMEQUEUE = 306
    GET_CONSUMER_RUNNING_INFO = 307
    QUERY_CORRECTION_OFFSET = 308
    CONSUME_MESSAGE_DIRECTLY = 309
    SEND_MESSAGE_V2 = 310
    GET_UNIT_TOPIC_LIST = 311
    GET_HAS_UNIT_SUB_TOPIC_LIST = 312
    GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST = 313
    CLONE_GROUP_OFFSET = 314
    VIEW_BROKER_STATS_DATA = 315
    CLEAN_UNUSED_TOPIC = 316
    GET_BROKER_CONSUME_STATS = 317
    UPDATE_NAMESRV_CONFIG = 318
    GET_NAMESRV_CONFIG = 319
    SEND_BATCH_MESSAGE = 320
    QUERY_CONSUME_QUEUE = 321
    QUERY_DATA_VERSION = 322
    RESUME_CHECK_HALF_MESSAGE = 323
    SEND_REPLY_MESSAGE = 324
    SEND_REPLY_MESSAGE_V2 = 325
    PUSH_REPLY_MESSAGE_TO_CLIENT = 326
    ADD_WRITE_PERM_OF_BROKER = 327


class ResponseCode(_Codes):
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    TRANSACTION_SHOULD_COMMIT = 200
    TRANSACTION_SHOULD_ROLLBACK = 201
    TRANSACTION_STATE_UNKNOW = 202
    TRANSACTION_STATE_GROUP_WRONG = 203
    NO_BUYER_ID = 204
    NOT_IN_CURRENT_UNIT = 205
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    NO_MESSAGE = 208
    UPDATE_AND_CREATE_ACL_CONFIG_FAILED = 209
    DELETE_ACL_CONFIG_FAILED = 210
    UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED = 211
    FLOW_CONTROL = 215


class LanguageCode(_Codes):
    """``LanguageCode``: the enum's name travels in JSON headers, its byte in ROCKETMQ headers."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12


class Version:
    """Ordinals of ``MQVersion.Version`` that peers branch on (``DefaultRequestProcessor.getRouteInfoByTopic``,
    ``PullAPIWrapper``, ``RegisterBrokerBody``; docs/remoting-protocol.md)."""

    V3_0_11 = 37
    V4_9_4 = 401
    V4_9_8 = 409
    CURRENT = V4_9_8


def code_name(code: int, *, response: bool = False) -> str:
    """``GET_ROUTEINFO_BY_TOPIC(105)``-style label for logs and error messages."""
    name = (ResponseCode if response else RequestCode).name(code)
    return f"{name}({code})" if name else str(code)
