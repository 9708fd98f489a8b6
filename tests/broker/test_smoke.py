"""The Java smoke program of the shared RocketMQ 4.9.8 distribution (``smoke/rmq-smoke.jar``, unmodified, as its
``bin/smoke`` runs it; skipped with a distribution that lacks it, such as an Apache binary release) against
``rocketstream serve``: admin topic creation, 100 sync sends with tags/keys/properties, a lite-pull
consumer committing offsets that the broker then reports (GET_CONSUME_STATS), a tag-filtered push
consumer, and a query by key."""

from __future__ import annotations

import subprocess

import pytest

from tests.broker.conftest import Served
from tests.realbroker import peers


def test_java_smoke_passes(served: Served, java_dist, tmp_path) -> None:
    try:
        argv = peers.smoke_command(tmp_path, "--namesrv", served.namesrv_addr, "--timeout-s", "150", dist=java_dist)
    except peers.JavaUnavailable as exc:
        pytest.skip(str(exc))
    res = subprocess.run(argv, env=peers.server_env(java_dist), capture_output=True, text=True, timeout=200)
    out = res.stdout + res.stderr
    assert res.returncode == 0, f"smoke failed ({res.returncode}):\n{out[-6000:]}\n--- serve log ---\n" \
                                f"{served.log_text()[-4000:]}"
    assert "SMOKE PASSED" in out
    assert "lite-pull received 100/100 distinct (dup=0, bad=0)" in out
    assert "push consumer (TagA) received 50/50 TagA, 0 other tags" in out
