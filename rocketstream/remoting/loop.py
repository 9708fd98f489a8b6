"""The one place that chooses the event loop our servers and clients run on.

uvloop (libuv under asyncio's loop interface; a wheel on Linux and macOS) when it is installed, else asyncio's
own loop. The environment variable ``ROCKETSTREAM_UVLOOP=0`` (or ``false``/``no``/``off``) keeps asyncio's
loop even where uvloop is installed. Everything the remoting layer asks of a loop works on both: buffered
protocols with ``pause_reading``/``resume_reading`` (remoting/transport.py), ``set_write_buffer_limits``,
``start_tls`` on an open connection, ``call_soon_threadsafe`` / ``run_coroutine_threadsafe`` from other
threads (client/instance.py, spark/network/routes.py) and signal handlers (serve.py).

The loops are made here, not through a global event loop policy: code of the application that embeds our
client keeps the loop it chose.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["UVLOOP_ENV", "loop_kind", "new_event_loop", "run"]

UVLOOP_ENV = "ROCKETSTREAM_UVLOOP"
_OFF = frozenset({"0", "false", "no", "off"})

T = TypeVar("T")


def _factory() -> Callable[[], asyncio.AbstractEventLoop]:
    if os.environ.get(UVLOOP_ENV, "").strip().lower() in _OFF or sys.platform == "win32":
        return asyncio.new_event_loop
    try:
        import uvloop
    except ImportError:   # not installed (an optional, Linux/macOS-only dependency): asyncio's loop
        return asyncio.new_event_loop
    return uvloop.new_event_loop


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop: uvloop's unless it is missing or turned off (module text)."""
    return _factory()()


def loop_kind() -> str:
    """``"uvloop"`` or ``"asyncio"``: what :func:`new_event_loop` makes in this process now."""
    return "uvloop" if _factory() is not asyncio.new_event_loop else "asyncio"


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on a loop of :func:`new_event_loop`."""
    if sys.version_info >= (3, 11):
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            return runner.run(main)
    loop = new_event_loop()   # Python 3.10: asyncio.run's steps, on our loop
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main)
    finally:
        try:
            for task in asyncio.all_tasks(loop):
                task.cancel()
            loop.run_until_complete(asyncio.gather(*asyncio.all_tasks(loop), return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
