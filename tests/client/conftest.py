"""Fixtures of the client tests. ``mq_broker`` (ours + java, once per session) lives in tests/conftest.py,
shared with the Spark network tests."""

from __future__ import annotations

# the compiled Java peer of the interop scenarios (tests/client/interop_peers.py)
from tests.client.interop_peers import interop_classes  # noqa: E402,F401
