"""The consumers' config dataclasses (client/config.py): RocketMQ's defaults, one check per field naming it, keyword
calls and config objects giving the same consumer, each consumer with its own copy."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from rocketstream.client.allocate import MessageQueue
from rocketstream.client.config import (
    CONSUME_TIMESTAMP_DEFAULT_AGO_S,
    ClientConfig,
    ConsumerConfig,
    LitePullConsumerConfig,
    PushConsumerConfig,
)
from rocketstream.client.lite_pull import LitePullConsumer
from rocketstream.client.offset_store import BrokerOffsetClient, ReadOffsetType, RemoteBrokerOffsetStore
from rocketstream.client.push_consumer import PushConsumer
from rocketstream.errors import MQClientError, OptionError
from rocketstream.remoting import ResponseCode

NS = "127.0.0.1:1"


def test_defaults_are_rocketmqs() -> None:
    push = PushConsumerConfig(namesrv=NS)
    assert (push.pull_batch_size, push.broker_suspend_max_time_ms, push.consume_thread_min, push.consume_thread_max,
            push.consume_message_batch_max_size, push.pull_threshold_for_queue, push.pull_threshold_size_for_queue,
            push.consume_concurrently_max_span, push.max_reconsume_times, push.consume_timeout_minutes,
            push.unlock_delay_s) == (32, 15_000, 20, 20, 1, 1000, 100, 2000, -1, 15.0, 20.0)
    lite = LitePullConsumerConfig(namesrv=NS)
    assert (lite.pull_batch_size, lite.broker_suspend_max_time_ms, lite.pull_threshold_for_all,
            lite.consume_max_span, lite.auto_commit, lite.auto_commit_interval_s, lite.poll_timeout_s) == \
        (10, 20_000, 10_000, 2000, True, 5.0, 5.0)
    for cfg in (push, lite):
        assert (cfg.message_model, cfg.consume_from_where, cfg.allocate_strategy, cfg.instance_name) == \
            ("CLUSTERING", "CONSUME_FROM_LAST_OFFSET", "AVG", "DEFAULT")
        assert cfg.consume_timestamp_ms is None
    assert push.effective_max_reconsume_times(False) == 16 and push.effective_max_reconsume_times(True) == 2**31 - 1


def test_a_shared_base_holds_the_common_fields() -> None:
    common = set(ConsumerConfig.field_names())
    assert {"namesrv", "instance_name", "credentials", "namespace", "tls"} == set(ClientConfig.field_names())
    assert set(ClientConfig.field_names()) < common
    assert common < set(PushConsumerConfig.field_names()) and common < set(LitePullConsumerConfig.field_names())
    assert "consume_thread_max" not in LitePullConsumerConfig.field_names()
    assert "auto_commit" not in PushConsumerConfig.field_names()


def test_consume_timestamp() -> None:
    cfg = PushConsumerConfig(namesrv=NS, consume_from_where="CONSUME_FROM_TIMESTAMP", consume_timestamp=1_700_000)
    assert cfg.consume_timestamp_ms == 1_700_000
    before = int((time.time() - CONSUME_TIMESTAMP_DEFAULT_AGO_S) * 1000)
    cfg = LitePullConsumerConfig(namesrv=NS, consume_from_where="CONSUME_FROM_TIMESTAMP")
    after = int((time.time() - CONSUME_TIMESTAMP_DEFAULT_AGO_S) * 1000)
    assert cfg.consume_timestamp_ms is not None and before <= cfg.consume_timestamp_ms <= after
    with pytest.raises(OptionError, match="consume_timestamp"):
        PushConsumerConfig(namesrv=NS, consume_timestamp="yesterday")


BAD_PUSH: list[tuple[str, Any]] = [
    ("namesrv", ""), ("namesrv", None), ("instance_name", ""), ("message_model", "FANOUT"),
    ("consume_from_where", "CONSUME_FROM_NOWHERE"), ("allocate_strategy", "RANDOM"), ("allocate_args", [1]),
    ("pull_batch_size", 0), ("pull_batch_size", 1025), ("pull_batch_size", True), ("pull_batch_size", 1.5),
    ("pull_threshold_for_queue", 0), ("pull_threshold_for_queue", 65536), ("pull_threshold_size_for_queue", 1025),
    ("consume_thread_min", 0), ("consume_thread_max", 1001), ("consume_message_batch_max_size", 0),
    ("consume_concurrently_max_span", 0), ("pull_threshold_for_topic", 0), ("pull_threshold_for_topic", 6553501),
    # DefaultMQPushConsumerImpl.checkConfig (4.9.8): pullThresholdSizeForTopic -1 or [1, 102400]
    ("pull_threshold_size_for_topic", 102401), ("pull_threshold_size_for_topic", -2),
    ("max_reconsume_times", -2), ("pull_interval_ms", -1), ("pull_interval_ms", 65536),
    ("suspend_current_queue_time_millis", -1), ("broker_suspend_max_time_ms", -1), ("consume_timeout_minutes", 0),
    ("lock_interval_s", 0), ("lock_max_live_time_s", "30"), ("unlock_delay_s", -1), ("await_termination_s", -1),
    ("pull_delay_on_exception_s", None), ("rebalance_interval_s", 0),
]


@pytest.mark.parametrize(("name", "value"), BAD_PUSH)
def test_each_push_field_is_checked_by_name(name: str, value: Any) -> None:
    with pytest.raises(OptionError) as err:
        PushConsumer("g", **{"namesrv": NS, name: value})
    assert err.value.option == name


@pytest.mark.parametrize(("name", "value"), [
    ("pull_batch_size", 0), ("pull_threshold_for_all", 0), ("consume_max_span", 0), ("auto_commit", "yes"),
    ("auto_commit_interval_s", -1), ("poll_timeout_s", "5"), ("topic_metadata_check_interval_s", 0),
    ("allocate_strategy", "RANDOM"), ("message_model", "FANOUT")])
def test_each_lite_field_is_checked_by_name(name: str, value: Any) -> None:
    with pytest.raises(OptionError) as err:
        LitePullConsumer("g", **{"namesrv": NS, name: value})
    assert err.value.option == name


def test_consume_thread_min_not_above_max() -> None:
    with pytest.raises(OptionError, match="consume_thread_min"):
        PushConsumerConfig(namesrv=NS, consume_thread_min=8, consume_thread_max=4)
    assert PushConsumerConfig(namesrv=NS, consume_thread_min=4, consume_thread_max=4).consume_thread_min == 4


def test_lite_pull_batch_size_has_no_push_upper_bound() -> None:
    """The push consumer's ranges are DefaultMQPushConsumerImpl.checkConfig's; the lite consumer keeps >= 1."""
    assert LitePullConsumer("g", namesrv=NS, pull_batch_size=5000).config.pull_batch_size == 5000


def test_keywords_and_config_give_the_same_consumer_each_with_its_own_copy() -> None:
    by_keywords = PushConsumer("g", namesrv=NS, consume_thread_min=4, consume_thread_max=4, pull_batch_size=64)
    cfg = PushConsumerConfig(namesrv=NS, consume_thread_min=4, consume_thread_max=4, pull_batch_size=64)
    by_config = PushConsumer("g", cfg)
    assert by_keywords.config == by_config.config == cfg
    assert by_config.config is not cfg
    by_config.config.pull_threshold_for_queue = 7   # what messageQueueChanged does with a topic threshold
    assert cfg.pull_threshold_for_queue == 1000
    overridden = PushConsumer("g", cfg, pull_batch_size=16, instance_name="other")
    assert (overridden.config.pull_batch_size, overridden.config.instance_name) == (16, "other")
    assert cfg.pull_batch_size == 64
    with pytest.raises(OptionError, match="pull_batch_size"):
        PushConsumer("g", cfg, pull_batch_size=0)


def test_unknown_keywords_and_wrong_config_types_are_named() -> None:
    with pytest.raises(OptionError) as err:
        PushConsumer("g", namesrv=NS, consume_thread=4)
    assert err.value.option == "consume_thread" and "consume_thread_max" in str(err.value)
    with pytest.raises(OptionError) as err:
        LitePullConsumer("g", namesrv=NS, consume_thread_max=4)   # a push consumer's field
    assert err.value.option == "consume_thread_max" and "pull_threshold_for_all" in str(err.value)
    with pytest.raises(OptionError, match="must be a PushConsumerConfig"):
        PushConsumer("g", LitePullConsumerConfig(namesrv=NS))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="namesrv"):
        PushConsumer("g")


def test_response_code_flow_control_is_rocketmqs() -> None:
    """ResponseCode.FLOW_CONTROL (4.9.8's common ResponseCode): the push consumer re-pulls after 20 ms on it."""
    assert ResponseCode.FLOW_CONTROL == 215 and ResponseCode.name(215) == "FLOW_CONTROL"


# ------------------------------------------------------------------ the broker offset store's requests
class _API:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    async def query_offset(self, addr: str, group: str, topic: str, queue_id: int) -> int | None:
        self.calls.append(("query", addr, group, topic, queue_id))
        return 42

    async def update_offset(self, addr: str, group: str, topic: str, queue_id: int, offset: int, *,
                            oneway: bool = True) -> None:
        self.calls.append(("update", addr, group, topic, queue_id, offset, oneway))


class _Instance:
    def __init__(self, known: dict[str, str]) -> None:
        self.api = _API()
        self.known = known

    async def find_master_addr(self, broker_name: str, topic: str) -> str:
        addr = self.known.get(broker_name)
        if addr is None:
            raise MQClientError(f"the broker[{broker_name}] does not exist (topic {topic})")
        return addr


def test_broker_offset_client_sends_to_the_master_of_the_queues_broker() -> None:
    inst = _Instance({"broker-a": "10.0.0.1:10911"})
    store = RemoteBrokerOffsetStore("g", BrokerOffsetClient(inst, "g"))
    mq = MessageQueue("T", "broker-a", 3)

    async def go() -> None:
        store.update_offset(mq, 7, False)
        await store.persist_all([mq])
        await store.update_consume_offset_to_broker(mq, 9, oneway=False)
        store.remove_offset(mq)
        assert await store.read_offset(mq, ReadOffsetType.READ_FROM_STORE) == 42
        with pytest.raises(MQClientError, match="broker-b"):
            await store.update_consume_offset_to_broker(MessageQueue("T", "broker-b", 0), 1, oneway=False)
    asyncio.run(go())
    assert inst.api.calls == [("update", "10.0.0.1:10911", "g", "T", 3, 7, True),
                              ("update", "10.0.0.1:10911", "g", "T", 3, 9, False),
                              ("query", "10.0.0.1:10911", "g", "T", 3)]
    assert store.offset_table[mq] == 42


def test_the_configs_are_exported_by_the_client_package() -> None:
    import rocketstream.client as client

    assert client.PushConsumerConfig is PushConsumerConfig and client.LitePullConsumerConfig is LitePullConsumerConfig
    assert client.ClientConfig is ClientConfig
    assert {"PushConsumerConfig", "LitePullConsumerConfig", "ClientConfig"} <= set(client.__all__)
