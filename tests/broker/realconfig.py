"""``config/`` of a store the real 4.9.8 broker wrote, for the offset and subscription-group tests.

``ROCKETSTREAM_REAL_STORES=DIR`` reuses stores made with ``python -m tests.realbroker.make_store DIR``
(as tests/realstore does); otherwise the "clean" variant is generated once per test session. Skips
only when Java or the RocketMQ distribution is missing.
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

import pytest


@functools.lru_cache(maxsize=1)
def _generated() -> Path:
    from tests.realbroker import make_store

    out = Path(tempfile.mkdtemp(prefix="rs-broker-real-"))
    stores = make_store.generate(out, ("clean",), log=lambda s: None)
    return Path(stores["clean"].root) / "config"


def real_config_dir() -> Path:
    reuse = os.environ.get("ROCKETSTREAM_REAL_STORES")
    if reuse:
        return Path(reuse) / "clean" / "store" / "config"
    from tests.realbroker import peers

    try:
        peers.find_dist()
        peers.find_java()
    except peers.JavaUnavailable as e:
        pytest.skip(f"real RocketMQ 4.9.8 stores cannot be generated: {e}")
    return _generated()
