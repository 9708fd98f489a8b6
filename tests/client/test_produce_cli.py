"""``rocketstream produce --namesrv``: sends over the network with the client's Producer (both brokers),
JSON lines with --json, and options of the other mode are errors naming the option."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.client.test_api import uniq
from tests.client.test_producer import pull_all
from tests.realbroker import peers

REPO = Path(__file__).resolve().parents[2]


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("ROCKETSTREAM_CONF", None)
    return subprocess.run([sys.executable, "-m", "rocketstream.cli", "produce", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def test_produce_over_the_network_json(mq_broker):
    topic = uniq("CapiCli")
    res = cli("--namesrv", mq_broker.namesrv_addr, "--topic", topic, "--count", "20", "--body-size", "100",
              "--tags", "A,B", "--keys", "k1,k2", "--json")
    assert res.returncode == 0, res.stderr
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    msgs, summary = lines[:-1], lines[-1]["summary"]
    assert summary["sent"] == 20 and summary["statuses"] == {"SEND_OK": 20} and summary["topic"] == topic
    assert len({m["msgId"] for m in msgs}) == 20
    got = {m.msg_id: m for m in pull_all(mq_broker, topic, expect=20)}
    assert set(got) == {m["msgId"] for m in msgs}
    for i, m in enumerate(msgs):
        g = got[m["msgId"]]
        assert len(g.body) == 100 and g.tags == "AB"[i % 2] and g.keys == f"k{i % 2 + 1}"
        assert (g.queue_id, g.queue_offset) == (m["queueId"], m["queueOffset"])


def test_produce_over_the_network_summary(mq_broker):
    res = cli("--namesrv", mq_broker.namesrv_addr, "--topic", uniq("CapiCliS"), "--count", "5")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("sent 5 messages to ") and "SEND_OK" in res.stdout


@pytest.mark.parametrize("args,option", [
    (["--namesrv", "127.0.0.1:1", "--queues", "4"], "--queues"),
    (["--namesrv", "127.0.0.1:1", "--store", "/tmp/x"], "--store"),
    (["--keys", "a"], "--keys"),
    (["--group", "g"], "--group"),
    (["--namesrv", "127.0.0.1:1", "--body-size", "0"], "--body-size"),
])
def test_option_of_the_other_mode_is_an_error(args, option):
    res = cli("--topic", "T", "--count", "1", *args)
    assert res.returncode == 2 and option in res.stderr, res.stderr


def test_unreachable_name_server_is_named():
    addr = f"127.0.0.1:{peers.free_port()}"
    res = cli("--namesrv", addr, "--topic", "T", "--count", "1", "--send-timeout", "2", timeout=30)
    assert res.returncode == 2 and addr in res.stderr, res.stderr


def test_invalid_topic_is_named():
    res = cli("--namesrv", "127.0.0.1:1", "--topic", "bad topic", "--count", "1", timeout=30)
    assert res.returncode == 2 and "topic" in res.stderr, res.stderr
