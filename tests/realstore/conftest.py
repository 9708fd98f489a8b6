"""Stores written by the real Apache RocketMQ 4.9.8 broker, generated once per test session.

``real_stores`` runs ``tests.realbroker.make_store.generate`` (name server + broker + our Java peer
program, see that module) into a session temp dir: variants clean, abort, retention, aged, each with
the Java client's reading of it (the oracle). Tests must work on copies (``copy_of``): the originals
are shared by the whole session.

Skips only when the runtime is missing (no Java 11+/17 JDK or no ../shared/rocketmq-4.9.8); any
other problem generating the stores is an error. ``ROCKETSTREAM_REAL_STORES=DIR`` reuses stores made
earlier with ``python -m tests.realbroker.make_store DIR`` (all four variants) instead of starting
the broker - handy while iterating on a fix.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

_REPO = str(Path(__file__).resolve().parents[2])
if _REPO not in sys.path:   # tests.realbroker is imported as a package from the repository root
    sys.path.insert(0, _REPO)

from tests.realbroker import make_store, peers  # noqa: E402


@pytest.fixture(scope="session")
def real_stores(tmp_path_factory) -> dict[str, make_store.RealStore]:
    try:
        peers.find_dist()
        peers.find_java()
    except peers.JavaUnavailable as e:
        pytest.skip(f"real RocketMQ 4.9.8 stores cannot be generated: {e}")
    reuse = os.environ.get("ROCKETSTREAM_REAL_STORES")
    if reuse:
        stores = {}
        for v in make_store.VARIANTS:
            d = Path(reuse) / v
            info = json.loads((d / "info.json").read_text())
            stores[v] = make_store.RealStore(v, d / "store", d / "oracle.jsonl", info)
        return stores
    t0 = time.monotonic()
    stores = make_store.generate(tmp_path_factory.mktemp("real-stores"), make_store.VARIANTS, log=lambda s: None)
    print(f"\nreal stores generated in {time.monotonic() - t0:.1f} s: {stores['clean'].info['timings']}")
    return stores


@pytest.fixture(scope="session")
def peer_classes(real_stores, tmp_path_factory) -> Path:
    """RealStorePeer compiled (for tests that start a broker themselves)."""
    return peers.compile_peer(tmp_path_factory.mktemp("peer-classes"))


@pytest.fixture(scope="session")
def copy_of(tmp_path_factory):
    """copy_of(src) -> a fresh copy of a store directory (mtimes kept)."""
    def copy(src: Path, name: str = "store") -> Path:
        return make_store.copy_store(src, tmp_path_factory.mktemp(name) / "store")
    return copy
