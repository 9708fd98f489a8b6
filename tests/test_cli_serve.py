"""The server commands as processes (rocketstream/serve.py): ``serve`` starts the name server, then the broker
registered with it, and stops them in the other order; a signal stops them cleanly, even one that arrives
while they start; ``namesrv`` alone loads no broker or store module."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from rocketstream.remoting import RequestCode, ResponseCode
from rocketstream.remoting.json_body import loads
from tests.namesrv.conftest import invoke
from tests.realbroker import peers

REPO = Path(__file__).resolve().parent.parent


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("ROCKETSTREAM_CONF", None)   # the built-in broker.conf: no namesrvAddr of its own
    return env


def _stop(proc: subprocess.Popen, sig: signal.Signals, timeout: float = 60) -> int:
    proc.send_signal(sig)
    try:
        return proc.wait(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        peers._forget(proc)


def _line_index(lines: list[str], pattern: str) -> int:
    found = [i for i, line in enumerate(lines) if re.search(pattern, line)]
    assert len(found) == 1, f"{pattern!r} found on lines {found} of:\n" + "\n".join(lines)
    return found[0]


def test_serve_registers_the_broker_with_its_own_name_server_and_stops_the_broker_first(tmp_path: Path) -> None:
    """Both on port 0: the broker registers with the address the name server was given by the OS."""
    log = tmp_path / "serve.log"
    proc = peers._spawn([sys.executable, "-m", "rocketstream.cli", "serve", "--store", str(tmp_path / "store"),
                         "--listen", "127.0.0.1:0", "--namesrv-listen", "127.0.0.1:0"], _env(), log)
    try:
        peers.Server("rocketstream serve", proc, log, 0).wait_ready("] boot success", timeout=90)
        text = log.read_text()
        ns_addr = re.search(r"The Name Server boot success\. serializeType=JSON, listening on (\S+)", text)
        broker = re.search(r"The broker\[(\S+), (\S+)\] boot success\. serializeType=JSON and name server is (\S+) ",
                           text)
        assert ns_addr and broker, text
        assert not ns_addr[1].endswith(":0") and broker[3] == ns_addr[1]
        resp = invoke(ns_addr[1], RequestCode.GET_BROKER_CLUSTER_INFO)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        info = loads(resp.body)
        assert info["brokerAddrTable"][broker[1]]["brokerAddrs"] == {0: broker[2]}
    finally:
        status = _stop(proc, signal.SIGTERM)
    assert status == 0, peers._tail(log)
    lines = log.read_text().splitlines()
    # the broker's UNREGISTER_BROKER reached the name server, which stopped after the broker
    order = [_line_index(lines, r"The Name Server boot success"), _line_index(lines, r"The broker\[.*boot success"),
             _line_index(lines, rf"namesrv: unregisterBroker, remove from brokerLiveTable OK, {re.escape(broker[2])}$"),
             _line_index(lines, r"The broker\[.*shutdown OK"), _line_index(lines, r"The Name Server on .* stopped")]
    assert order == sorted(order), "\n".join(lines)
    assert "Traceback" not in "\n".join(lines)


def test_broker_alone_stops_cleanly_on_sigint(tmp_path: Path) -> None:
    log = tmp_path / "broker.log"
    proc = peers._spawn([sys.executable, "-m", "rocketstream.cli", "broker", "--store", str(tmp_path / "store"),
                         "--listen", "127.0.0.1:0"], _env(), log)
    try:
        peers.Server("rocketstream broker", proc, log, 0).wait_ready("] boot success", timeout=90)
    finally:
        status = _stop(proc, signal.SIGINT)
    text = log.read_text()
    assert status == 0, text
    assert re.search(r"The broker\[.*\] shutdown OK", text) and "Traceback" not in text, text
    assert "Name Server" not in text, text   # the broker command starts no name server


def test_a_signal_while_starting_stops_the_name_server_once_started_and_loads_no_broker() -> None:
    """SIGTERM sent before the name server has bound its port: it still starts, logs its ready line, and
    stops cleanly (exit 0); and neither the broker nor the store was imported for it."""
    code = (
        "import asyncio, json, logging, os, signal, sys\n"
        "from rocketstream.namesrv import NamesrvConfig\n"
        "from rocketstream.serve import run_until_signal\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stderr)\n"
        "async def main():\n"
        "    asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signal.SIGTERM)\n"
        "    await run_until_signal(namesrv=NamesrvConfig(port=0))\n"
        "asyncio.run(main())\n"
        "print(json.dumps(sorted(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=_env(), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "The Name Server boot success" in out.stderr and "stopped" in out.stderr, out.stderr
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    heavy = [m for m in loaded if m.split(".")[:2] in (["rocketstream", "broker"], ["rocketstream", "store"])]
    assert not heavy, heavy
