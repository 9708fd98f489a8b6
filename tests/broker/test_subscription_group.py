"""SubscriptionGroupManager: config/subscriptionGroup.json exactly as the real 4.9.8 broker writes it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rocketstream.broker.subscription_group import (
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
    java_table_order,
)
from rocketstream.codec.fastjson import parse_fastjson
from rocketstream.errors import OffsetFileError

BUILT_IN = {"TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY", "CID_ONSAPI_PULL",
            "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER"}
DEFAULTS_JSON = {"brokerId": 0, "consumeBroadcastEnable": True, "consumeEnable": True, "consumeFromMinEnable": True,
                 "notifyConsumerIdsChangedEnable": True, "retryMaxTimes": 16, "retryQueueNums": 1,
                 "whichBrokerWhenConsumeSlowly": 1}


@pytest.fixture(scope="module")
def real_config(real_stores) -> Path:
    """``config/`` of the clean store the real 4.9.8 broker wrote (tests/conftest.py)."""
    return Path(real_stores["clean"].root) / "config"


def _manager(root: Path) -> SubscriptionGroupManager:
    m = SubscriptionGroupManager(root)
    m.load()
    return m


def test_real_broker_file_round_trips_byte_for_byte(real_config: Path, tmp_path: Path) -> None:
    shutil.copytree(real_config, tmp_path / "config")
    path = tmp_path / "config" / "subscriptionGroup.json"
    original = path.read_text()
    doc = parse_fastjson(original)
    assert isinstance(doc, dict)
    m = _manager(tmp_path)
    assert m.data_version == doc["dataVersion"]
    groups = m.all()
    assert list(groups) == list(doc["subscriptionGroupTable"]), "the Java table's iteration order"
    assert BUILT_IN <= set(groups)
    for name, cfg in groups.items():
        assert cfg.to_json() == doc["subscriptionGroupTable"][name]
        assert cfg.to_json() == {**DEFAULTS_JSON, "groupName": name}  # every group the broker made: defaults
    assert m.encode() == original
    m.persist()
    assert path.read_text() == original
    assert (tmp_path / "config" / "subscriptionGroup.json.bak").read_text() == original


def test_defaults_and_built_in_groups_without_a_file(tmp_path: Path) -> None:
    m = _manager(tmp_path)
    assert set(m.all()) == BUILT_IN
    assert m.get("nobody") is None
    cfg = SubscriptionGroupConfig("g")
    assert (cfg.retry_queue_nums, cfg.retry_max_times, cfg.broker_id, cfg.which_broker_when_consume_slowly) == (
        1, 16, 0, 1)
    assert cfg.consume_enable and cfg.consume_from_min_enable and cfg.consume_broadcast_enable
    assert cfg.notify_consumer_ids_changed_enable
    assert not (tmp_path / "config" / "subscriptionGroup.json").exists(), "loading writes nothing"


def test_find_or_create_auto_creates_and_persists(tmp_path: Path) -> None:
    m = _manager(tmp_path)
    counter = m.data_version["counter"]
    assert m.find_or_create("app", auto_create=False) is None
    assert m.get("app") is None
    assert m.find_or_create("CID_RMQ_SYS_TRANS", auto_create=False) is not None  # system groups always
    cfg = m.find_or_create("app", auto_create=True)
    assert cfg is not None and cfg.group_name == "app" and cfg.retry_max_times == 16
    assert m.find_or_create("app", auto_create=False) is cfg
    assert m.data_version["counter"] == counter + 2
    again = _manager(tmp_path)
    assert again.get("app") == cfg
    assert again.data_version == m.data_version
    doc = parse_fastjson((tmp_path / "config" / "subscriptionGroup.json").read_bytes())
    assert isinstance(doc, dict)
    assert doc["subscriptionGroupTable"]["app"] == {**DEFAULTS_JSON, "groupName": "app"}


def test_update_delete_and_disable(tmp_path: Path) -> None:
    m = _manager(tmp_path)
    m.update(SubscriptionGroupConfig("orders", retry_max_times=3, consume_broadcast_enable=False))
    assert _manager(tmp_path).get("orders") == SubscriptionGroupConfig(
        "orders", retry_max_times=3, consume_broadcast_enable=False)
    m.update(SubscriptionGroupConfig("orders", retry_queue_nums=2))
    assert _manager(tmp_path).get("orders") == SubscriptionGroupConfig("orders", retry_queue_nums=2)
    counter = m.data_version["counter"]
    m.disable_consume("orders")
    assert m.get("orders") is not None and not m.get("orders").consume_enable  # type: ignore[union-attr]
    assert m.data_version["counter"] == counter + 1
    assert m.delete("orders") is True
    assert m.delete("orders") is False
    assert _manager(tmp_path).get("orders") is None


def test_unknown_fields_of_other_versions_are_kept(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    path = tmp_path / "config" / "subscriptionGroup.json"
    path.write_text('{"dataVersion":{"counter":3,"timestamp":5,"stateVersion":0},"subscriptionGroupTable":{'
                    '"g":{"groupName":"g","retryMaxTimes":2,"consumeTimeoutMinute":15,"attributes":{}}}}')
    m = _manager(tmp_path)
    cfg = m.get("g")
    assert cfg is not None and cfg.retry_max_times == 2 and cfg.extra == {"consumeTimeoutMinute": 15, "attributes": {}}
    m.persist()
    doc = parse_fastjson(path.read_bytes())
    assert isinstance(doc, dict)
    assert doc["subscriptionGroupTable"]["g"]["consumeTimeoutMinute"] == 15
    assert doc["dataVersion"] == {"counter": 3, "timestamp": 5, "stateVersion": 0}


def test_java_table_order_is_by_hash_bin_then_insertion() -> None:
    # bins in a 2048-slot ConcurrentHashMap: SELF_TEST_C_GROUP 51, RsGroup 644, TOOLS_CONSUMER 1543
    assert java_table_order(["TOOLS_CONSUMER", "RsGroup", "SELF_TEST_C_GROUP"]) == [
        "SELF_TEST_C_GROUP", "RsGroup", "TOOLS_CONSUMER"]
    # "Aa" and "BB" have the same String.hashCode: insertion order decides
    assert java_table_order(["BB", "Aa"]) == ["BB", "Aa"]
    assert java_table_order(["Aa", "BB"]) == ["Aa", "BB"]


@pytest.mark.parametrize("text", ["{ not json", '{"subscriptionGroupTable":[]}',
                                  '{"subscriptionGroupTable":{"g":{"retryMaxTimes":"16"}}}',
                                  '{"dataVersion":{"counter":"x"},"subscriptionGroupTable":{}}'])
def test_corrupt_file_is_a_typed_error_naming_it_and_nothing_is_written(tmp_path: Path, text: str) -> None:
    (tmp_path / "config").mkdir()
    path = tmp_path / "config" / "subscriptionGroup.json"
    path.write_text(text)
    m = SubscriptionGroupManager(tmp_path)
    with pytest.raises(OffsetFileError) as info:
        m.load()
    assert str(path) in str(info.value)
    assert path.read_text() == text
    assert not (tmp_path / "config" / "subscriptionGroup.json.bak").exists()


def test_corrupt_file_falls_back_to_backup(tmp_path: Path) -> None:
    m = _manager(tmp_path)
    m.update(SubscriptionGroupConfig("kept", retry_max_times=5))
    path = tmp_path / "config" / "subscriptionGroup.json"
    shutil.copy(path, tmp_path / "config" / "subscriptionGroup.json.bak")
    path.write_text("garbage")
    again = _manager(tmp_path)
    assert again.get("kept") == SubscriptionGroupConfig("kept", retry_max_times=5)
    again.persist()
    assert (tmp_path / "config" / "subscriptionGroup.json.bak").read_text() != "garbage"
    assert _manager(tmp_path).get("kept") is not None
