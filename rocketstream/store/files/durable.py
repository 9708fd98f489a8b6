"""The one place the store turns ``OSError`` into its error tree.

``os_errors(what, path, offset)`` wraps a block of file-system calls: an ``OSError`` inside it leaves as
``StoreError`` (or the subclass given) whose message is ``"<what>: [Errno N] <reason>"`` and which carries
the path and, when known, the byte offset. ``missing_ok=True`` swallows ``FileNotFoundError`` (a file a live
writer's retention deleted meanwhile, an unlink of something already gone).
"""

from __future__ import annotations

from types import TracebackType

from rocketstream.errors import StoreError

__all__ = ["OsErrors", "os_errors"]


def _reason(exc: OSError) -> str:
    """``[Errno 2] No such file or directory``: the error without the file name (the path is appended
    by ``StoreError`` already)."""
    if exc.strerror is None:
        return str(exc)
    return f"[Errno {exc.errno}] {exc.strerror}" if exc.errno is not None else exc.strerror


class OsErrors:
    """Context manager behind :func:`os_errors`."""

    __slots__ = ("error", "missing_ok", "offset", "path", "what")

    def __init__(self, what: str, path: object, offset: int | None, error: type[StoreError],
                 missing_ok: bool) -> None:
        self.what = what
        self.path = path
        self.offset = offset
        self.error = error
        self.missing_ok = missing_ok

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        if not isinstance(exc, OSError):
            return False
        if self.missing_ok and isinstance(exc, FileNotFoundError):
            return True
        raise self.error(f"{self.what}: {_reason(exc)}", path=self.path, offset=self.offset) from exc


def os_errors(what: str, path: object, offset: int | None = None, *, error: type[StoreError] = StoreError,
              missing_ok: bool = False) -> OsErrors:
    """``with os_errors("cannot map file", path): ...``: an ``OSError`` in the block becomes ``error``
    (``StoreError`` unless told) naming ``what`` failed, the path and the offset; see the module docstring."""
    return OsErrors(what, path, offset, error, missing_ok)
