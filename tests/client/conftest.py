"""Fixtures of the client tests: the two brokers (ours and the real 4.9.8 one) and the compiled Java peer
(tests/client/interop_peers.py)."""

from tests.client.interop_peers import interop_broker, interop_classes  # noqa: F401
