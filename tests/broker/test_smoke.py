"""The Java smoke program of the RocketMQ 4.9.8 distribution (``bin/smoke``, unmodified) against
``rocketstream serve``: admin topic creation, 100 sync sends with tags/keys/properties, a lite-pull
consumer committing offsets that the broker then reports (GET_CONSUME_STATS), a tag-filtered push
consumer, and a query by key."""

from __future__ import annotations

import os
import subprocess

from tests.broker.conftest import Served


def test_java_smoke_passes(served: Served, java_dist, tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RMQ_")}
    env["RMQ_DATA_DIR"] = str(tmp_path)
    res = subprocess.run([str(java_dist / "bin" / "smoke"), "--namesrv", served.namesrv_addr, "--timeout-s", "150"],
                         env=env, capture_output=True, text=True, timeout=200)
    out = res.stdout + res.stderr
    assert res.returncode == 0, f"smoke failed ({res.returncode}):\n{out[-6000:]}\n--- serve log ---\n" \
                                f"{served.log_text()[-4000:]}"
    assert "SMOKE PASSED" in out
    assert "lite-pull received 100/100 distinct (dup=0, bad=0)" in out
    assert "push consumer (TagA) received 50/50 TagA, 0 other tags" in out
