"""OffsetStore: CLUSTERING through each broker's consumerOffset.json, BROADCASTING through offsets.json."""

from __future__ import annotations

import pytest

from rocketstream.client.offset_store import LocalOffsetStore
from rocketstream.errors import (
    OptionError,
    ReadOnlyStoreError,
    RocketStreamError,
    StoreError,
)
from rocketstream.spark.offset_ranges import QueueKey
from rocketstream.spark.offset_store import OffsetStore
from rocketstream.store.meta.offsets import ConsumerOffsetManager


@pytest.fixture
def brokers(tmp_path):
    roots = {"broker-a": tmp_path / "a", "broker-b": tmp_path / "b"}
    for root in roots.values():
        root.mkdir()
    return roots


A0, A1, B0 = QueueKey("t", "broker-a", 0), QueueKey("t", "broker-a", 1), QueueKey("t", "broker-b", 0)


def test_clustering_read_is_minus_one_for_never_committed_queues(brokers):
    assert OffsetStore.clustering(brokers).read("g", [A1, A0, B0]) == {A0: -1, A1: -1, B0: -1}


def test_clustering_commit_goes_to_the_broker_hosting_each_queue(brokers):
    store = OffsetStore.clustering(brokers)
    store.commit("g", {A0: 5, A1: 7, B0: 9})
    assert ConsumerOffsetManager(brokers["broker-a"]).table() == {"t@g": {0: 5, 1: 7}}
    assert ConsumerOffsetManager(brokers["broker-b"]).table() == {"t@g": {0: 9}}
    assert store.read("g", [A0, A1, B0]) == {A0: 5, A1: 7, B0: 9}
    assert store.read("other", [A0]) == {A0: -1}


def test_clustering_commit_keeps_other_queues_and_groups(brokers):
    ConsumerOffsetManager(brokers["broker-a"]).commit("g2", "t", {0: 1})
    store = OffsetStore.clustering(brokers)
    store.commit("g", {A0: 5, A1: 7})
    store.commit("g", {A1: 8})
    assert ConsumerOffsetManager(brokers["broker-a"]).table() == {"t@g": {0: 5, 1: 8}, "t@g2": {0: 1}}


def test_clustering_unknown_broker_is_refused_before_any_write(brokers):
    store = OffsetStore.clustering({"broker-a": brokers["broker-a"]})
    with pytest.raises(StoreError, match="broker-b"):
        store.commit("g", {A0: 1, B0: 2})
    assert ConsumerOffsetManager(brokers["broker-a"]).table() == {}
    with pytest.raises(StoreError, match="broker-b"):
        store.read("g", [B0])


def test_clustering_read_only_refuses_commit(brokers):
    with pytest.raises(ReadOnlyStoreError):
        OffsetStore.clustering(brokers, read_only=True).commit("g", {A0: 1})


def test_negative_offsets_are_never_committed(brokers):
    with pytest.raises(RocketStreamError, match="negative"):
        OffsetStore.clustering(brokers).commit("g", {A0: -1})


def test_broadcasting_reads_and_persists_offsets_json_per_client_and_group(tmp_path):
    store = OffsetStore.broadcasting("10.0.0.1@DEFAULT", tmp_path)
    assert store.read("g", [A0]) == {A0: -1}
    store.commit("g", {A0: 3, B0: 4})
    store.commit("g", {A0: 6})
    assert (tmp_path / "10.0.0.1@DEFAULT" / "g" / "offsets.json").exists()
    assert store.read("g", [A0, B0, A1]) == {A0: 6, A1: -1, B0: 4}
    assert LocalOffsetStore(tmp_path, "10.0.0.1@DEFAULT", "g").read() == {
        ("t", "broker-a", 0): 6, ("t", "broker-b", 0): 4}
    assert store.read("other", [A0]) == {A0: -1}


def test_broadcasting_read_only_refuses_commit(tmp_path):
    with pytest.raises(ReadOnlyStoreError):
        OffsetStore.broadcasting("c", tmp_path, read_only=True).commit("g", {A0: 1})


@pytest.mark.parametrize("kwargs", [{"message_model": "CLUSTER"}, {"message_model": "CLUSTERING"},
                                    {"message_model": "BROADCASTING"}])
def test_bad_message_model_or_missing_location_names_the_option(kwargs):
    with pytest.raises(OptionError, match="messageModel"):
        OffsetStore(**kwargs)
