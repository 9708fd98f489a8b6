"""`rocketstream consume --namesrv` and `rocketstream consumer-progress --namesrv` against both brokers."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.client.scenario_util import produce, unique

REPO = Path(__file__).resolve().parents[2]


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("ROCKETSTREAM_CONF", None)
    return subprocess.run([sys.executable, "-m", "rocketstream.cli", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=REPO)


def test_consume_json_lines_then_progress_shows_no_lag(mq_broker) -> None:
    ns = mq_broker.namesrv_addr
    topic, group = unique("CliT"), unique("cli_g")
    # message i to queue i % 4 (sharding keys "0".."3": hashCode % 4), so each queue holds one tag: a queue whose
    # last messages are filtered out keeps that lag after the consumer stops (the consumed offset of a lite pull
    # consumer is the last delivered message + 1 until a later pull answers, as DefaultLitePullConsumer's
    # ProcessQueue.removeMessage gives it), and the producer's own round robin does not always start at queue 0
    produce(ns, topic, [f"m{i}".encode() for i in range(12)], tags=["A", "B"], sharding=lambda i: str(i % 4))
    r = cli("consume", "--namesrv", ns, "--group", group, "--topic", topic, "--from", "first",
            "--expression", "A", "--json", "--idle-timeout", "3")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert sorted(base64.b64decode(row["body"]) for row in rows) == sorted(f"m{i}".encode() for i in range(0, 12, 2))
    assert {row["tags"] for row in rows} == {"A"} and all(row["topic"] == topic for row in rows)
    assert {"msgId", "offsetMsgId", "queueId", "queueOffset", "storeTimestamp", "properties"} <= set(rows[0])
    p = cli("consumer-progress", "--namesrv", ns, "--group", group, "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    mine = [q for q in doc["queues"] if q["topic"] == topic]
    assert sum(q["brokerOffset"] for q in mine) == 12
    assert doc["diffTotal"] == 0 and all(q["consumerOffset"] == q["brokerOffset"] for q in mine)
    text = cli("consumer-progress", "--namesrv", ns, "--group", group)
    assert "Diff Total: 0" in text.stdout and "brokerOffset" in text.stdout


def test_consume_count_stops_and_plain_output(mq_broker) -> None:
    ns = mq_broker.namesrv_addr
    topic = unique("CliCount")
    produce(ns, topic, [f"x{i}".encode() for i in range(10)])
    r = cli("consume", "--namesrv", ns, "--group", unique("cli_c"), "--topic", topic, "--from", "first",
            "--count", "4", "--idle-timeout", "20")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 4 and "consumed 4 messages" in r.stderr


def test_consume_bad_arguments_are_one_line_errors() -> None:
    r = cli("consume", "--namesrv", "127.0.0.1:1", "--group", "g", "--topic", "T", "--from", "timestamp")
    assert r.returncode == 2 and "--timestamp" in r.stderr and "Traceback" not in r.stderr
    r = cli("consume", "--namesrv", "127.0.0.1:1", "--group", "bad group", "--topic", "T")
    assert r.returncode == 2 and "group" in r.stderr and "Traceback" not in r.stderr
    r = cli("consume", "--namesrv", "127.0.0.1:1", "--group", "g", "--topic", "T", "--idle-timeout", "1")
    assert r.returncode == 2 and "127.0.0.1:1" in r.stderr and "Traceback" not in r.stderr
    r = cli("consumer-progress", "--namesrv", "127.0.0.1:1", "--group", "g")
    assert r.returncode == 2 and "127.0.0.1:1" in r.stderr and "Traceback" not in r.stderr
