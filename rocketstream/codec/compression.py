"""Body compression named by SYSFLAG bits 0 and 8-10 (``MessageSysFlag``, ``CompressorFactory``)."""

from __future__ import annotations

import zlib

from rocketstream.codec.constants import (
    COMPRESSION_LZ4,
    COMPRESSION_TYPE_MASK,
    COMPRESSION_ZLIB,
    COMPRESSION_ZSTD,
    FLAG_COMPRESSED,
)
from rocketstream.errors import CorruptStoreError, OptionError

_COMPRESSION_NAMES = {0: "zlib", COMPRESSION_LZ4: "lz4", COMPRESSION_ZSTD: "zstd", COMPRESSION_ZLIB: "zlib"}


def compress_body(body: bytes, level: int = 5, *, compression: int = COMPRESSION_ZLIB) -> tuple[bytes, int]:
    """Compress a producer body; returns (stored bytes, SYSFLAG bits to OR in: bit 0 + type bits)."""
    if compression == COMPRESSION_ZLIB:
        data = zlib.compress(body, level)
    elif compression == COMPRESSION_LZ4:
        import lz4.frame

        data = lz4.frame.compress(body, compression_level=level)
    elif compression == COMPRESSION_ZSTD:
        import zstandard

        data = zstandard.ZstdCompressor(level=level).compress(body)
    else:
        raise OptionError("compression", "must be COMPRESSION_ZLIB, COMPRESSION_LZ4 or COMPRESSION_ZSTD", compression)
    return data, FLAG_COMPRESSED | (compression << 8)


def decompress_body(body: bytes, sys_flag: int, *, path: object = None, offset: int | None = None) -> bytes:
    """Body as the producer sent it: undo compression named by SYSFLAG bits 8-10 (0 means zlib)."""
    if not sys_flag & FLAG_COMPRESSED:
        return body
    kind = (sys_flag & COMPRESSION_TYPE_MASK) >> 8
    name = _COMPRESSION_NAMES.get(kind)
    if name is None:
        raise CorruptStoreError(f"unknown compression type {kind} in SYSFLAG 0x{sys_flag:X}", path=path, offset=offset)
    try:
        if name == "zlib":
            return zlib.decompress(body)
        if name == "lz4":
            import lz4.frame

            return lz4.frame.decompress(body)
        import zstandard

        # decompressobj copes with frames that do not record their content size.
        dobj = zstandard.ZstdDecompressor().decompressobj()
        data = dobj.decompress(body)
        if not dobj.eof:
            raise ValueError("truncated zstd frame")
        return data
    except Exception as exc:  # zlib.error, lz4's RuntimeError, ZstdError ... all mean "bad bytes"
        raise CorruptStoreError(f"cannot decompress {name} body ({len(body)} bytes): {exc}",
                                path=path, offset=offset) from exc

