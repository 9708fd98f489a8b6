"""Former name of :mod:`rocketstream.codec.arrow_records`, kept only until the network read imports that
module directly (it is being moved between modules while this one is renamed): every attribute resolves
there, on first use, so importing this module loads no pyarrow. Delete this file with the last
``codec.vectorized`` import."""

from __future__ import annotations

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    return getattr(importlib.import_module("rocketstream.codec.arrow_records"), name)
