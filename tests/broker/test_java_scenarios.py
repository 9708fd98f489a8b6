"""The real Java client (4.9.8, unmodified) against the broker: retry and DLQ, orderly consumption with queue locks,
broadcasting, search by timestamp and delayed delivery (tests/java/BrokerScenarios.java, one mode per test).

The broker is ours by default; ``ROCKETSTREAM_BROKER_TARGETS=java`` (or ``java,ours``) runs the same tests
against the real 4.9.8 broker, which they must pass: what is asserted here beyond "PASS" is what 4.9.8 does
(tests/broker/java_fixtures.py).
"""

from __future__ import annotations

import pytest

from tests.broker.java_fixtures import assert_pass, broker_target, run_scenario, scenario_classes  # noqa: F401


def _names(target, stem: str) -> tuple[str, str]:
    return f"{stem}Topic_{target.kind}", f"{stem}Group_{target.kind}"


@pytest.fixture(scope="module")
def dlq_run(broker_target, scenario_classes):  # noqa: F811
    topic, group = _names(broker_target, "Retry")
    run = run_scenario(scenario_classes, broker_target, "push-retry-dlq", topic, group, "--count", "20",
                       "--max-reconsume", "2", "--delay-level", "1", "--min-gap-ms", "800")
    return topic, group, assert_pass(run, broker_target)


def test_reconsume_later_goes_through_retry_topic_then_dlq(dlq_run):
    topic, group, r = dlq_run
    # delivered as sent, then twice from %RETRY%<group> (delay level 1 = 1 s each), then dead-lettered
    assert r["poison_reconsume_times"] == [0, 1, 2]
    assert all(gap >= 800 for gap in r["poison_gaps_ms"]), r["poison_gaps_ms"]
    assert r["normal_consumed"] == 20 and r["normal_duplicates"] == 0
    [dlq] = r["dlq"]
    assert dlq["topic"] == f"%DLQ%{group}"
    assert (dlq["queueId"], dlq["queueOffset"]) == (0, 0)      # %DLQ%<group> has 1 queue
    assert dlq["reconsumeTimes"] == 3                           # one more than the last delivery
    assert dlq["keys"].startswith("POISON-") and dlq["body"].startswith("poison body ")


def test_dlq_copy_properties_match_4_9_8(dlq_run):
    topic, group, r = dlq_run
    props = r["dlq"][0]["properties"]
    assert props["RETRY_TOPIC"] == topic                        # set by the first send-back
    assert props["ORIGIN_MESSAGE_ID"]                           # the original's commit-log msgId
    assert props["TAGS"] == "TagA"
    assert props["KEYS"] == r["dlq"][0]["keys"]
    # the copy it was dead-lettered from was the schedule service's re-put into %RETRY%<group> queue 0
    assert props["REAL_TOPIC"] == f"%RETRY%{group}" and props["REAL_QID"] == "0"
    # observed on 4.9.8: the DLQ copy is stored with DELAY=0 (the retry copy it came from carried DELAY=1;
    # a level > 0 would route it through SCHEDULE_TOPIC_XXXX again) and WAIT=false
    assert props["DELAY"] == "0" and props["WAIT"] == "false"


def test_orderly_two_consumers_split_then_take_over(broker_target, scenario_classes):  # noqa: F811
    topic, group = _names(broker_target, "Orderly")
    r = assert_pass(run_scenario(scenario_classes, broker_target, "orderly", topic, group, "--keys", "8",
                                 "--per-key", "20"), broker_target)
    assert r["queues"] == 4
    assert sorted(r["c1_queues"] + r["c2_queues"]) == [0, 1, 2, 3]
    assert r["c2_queues_after"] == [0, 1, 2, 3]
    assert r["overlaps"] == 0 and r["lock_conflicts"] == 0 and r["out_of_order"] == 0
    # c1's offsets were committed before c2 locked its queues: nothing is consumed twice
    assert r["duplicates"] == 0
    assert r["phase1_by_consumer"]["c1"] > 0 and r["phase1_by_consumer"]["c2"] > 0


@pytest.mark.slow  # about 25 s: the 20 s handover of a busy queue
def test_orderly_handover_waits_for_the_lock(broker_target, scenario_classes):  # noqa: F811
    """c2 joins while c1 works through a backlog: c1 drops two queues but, holding unconsumed messages, keeps
    their broker locks 20 s (the client's RebalancePushImpl unlockDelay); the broker must refuse c2's LOCK_BATCH_MQ
    for them until c1's UNLOCK_BATCH_MQ, so the split takes ~20 s."""
    topic, group = _names(broker_target, "OrderlyBacklog")
    r = assert_pass(run_scenario(scenario_classes, broker_target, "orderly", topic, group, "--keys", "8",
                                 "--per-key", "5", "--backlog", "20", "--work-ms", "50", timeout=150),
                    broker_target)
    assert r["split_ms"] >= 15_000, f"c2 got c1's queues after {r['split_ms']} ms: were they locked?"
    assert r["overlaps"] == 0 and r["lock_conflicts"] == 0 and r["out_of_order"] == 0
    # at-least-once at the handover: c1 persists the offset before its in-flight message finishes
    assert r["duplicates"] <= 4
    assert r["c2_queues_after"] == [0, 1, 2, 3]


def test_broadcast_each_consumer_gets_everything(broker_target, scenario_classes):  # noqa: F811
    topic, group = _names(broker_target, "Broadcast")
    r = assert_pass(run_scenario(scenario_classes, broker_target, "broadcast", topic, group, "--count", "40"),
                    broker_target)
    assert (r["b1_received"], r["b2_received"]) == (40, 40)
    assert (r["b1_duplicates"], r["b2_duplicates"]) == (0, 0)


def test_search_offset_by_timestamp(broker_target, scenario_classes):  # noqa: F811
    topic, group = _names(broker_target, "Timestamp")
    r = assert_pass(run_scenario(scenario_classes, broker_target, "timestamp", topic, group, "--count", "10"),
                    broker_target)
    assert r["searched_offsets"] == r["first_b_offsets"]
    assert r["push_received"] == 20
    # 4.9.8 answers QUERY_CONSUMER_OFFSET of an unknown group with 0 while the queue's first message is in
    # memory, so a new CONSUME_FROM_TIMESTAMP push consumer starts at 0 and gets the earlier messages too
    assert r["push_received_before_timestamp"] == 10


@pytest.fixture(scope="module")
def delay_run(broker_target, scenario_classes):  # noqa: F811
    topic, group = _names(broker_target, "Delay")
    run = run_scenario(scenario_classes, broker_target, "delay", topic, group, "--levels", "1,2,3",
                       "--expect-ms", "1000,2000,3000")
    return topic, assert_pass(run, broker_target)


def test_delayed_delivery_by_level(delay_run):
    _, r = delay_run
    lat = r["arrival_ms_by_level"]
    assert 850 <= lat["1"] < 7000 and 1850 <= lat["2"] < 8000 and 2850 <= lat["3"] < 9000, lat


def test_delayed_copy_properties_match_4_9_8(delay_run):
    topic, r = delay_run
    for level in ("1", "2", "3"):
        props = r["properties"][f"D-{level}"]
        assert props["REAL_TOPIC"] == topic and props["REAL_QID"].isdigit()
        # observed on 4.9.8: the copy the schedule service delivers still carries the sender's DELAY=<level>
        # and WAIT=true in its stored properties (not "DELAY removed, WAIT=false")
        assert props["DELAY"] == level and props["WAIT"] == "true"
