"""Session fixtures for the client tests: ``mq_broker`` is a name server + broker, parametrized over
"ours" (``rocketstream serve``) and "java" (the real Apache RocketMQ 4.9.8), each started once per
session (tests/broker/java_fixtures.py starts both with the same settings). "java" is skipped only
when Java or the distribution is missing."""

from __future__ import annotations

import pytest

from tests.broker import java_fixtures
from tests.realbroker import peers

BROKER_KINDS = ["ours", "java"]


@pytest.fixture(scope="session", params=BROKER_KINDS)
def mq_broker(request, tmp_path_factory) -> java_fixtures.BrokerTarget:
    kind = request.param
    if kind == "java":
        try:
            peers.find_java()
            peers.find_dist()
        except peers.JavaUnavailable as exc:
            pytest.skip(f"real broker unavailable: {exc}")
    home = tmp_path_factory.mktemp(f"client-{kind}")
    target = java_fixtures._start_java(home) if kind == "java" else java_fixtures.start_ours(home)
    try:
        yield target
    finally:
        java_fixtures.stop(target, clean=(kind == "ours"))


# the compiled Java peer of the interop scenarios (tests/client/interop_peers.py)
from tests.client.interop_peers import interop_classes  # noqa: E402,F401
