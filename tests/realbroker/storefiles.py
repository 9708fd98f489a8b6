"""Independent looks at store files, for before/after comparisons that must not trust the code under
test: the commit log's end found by walking record headers, and consume-queue bytes.

Record framing (docs/store-format.md; CommitLog.checkMessageAndReturnSize): int32 TOTALSIZE, int32
MAGICCODE; the V1 message magic is 0xDAA320A7 (MessageDecoder.MESSAGE_MAGIC_CODE), V2 0xDAA320AB (5.x,
MessageDecoder.MESSAGE_MAGIC_CODE_V2),
and a file's tail is a blank record with magic 0xCBD43194 (CommitLog.BLANK_MAGIC_CODE) or plain zeros
when it ended exactly.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path

MESSAGE_MAGICS = (0xDAA320A7, 0xDAA320AB)
BLANK_MAGIC = 0xCBD43194
CQ_UNIT = 20


def commitlog_end(store: Path) -> int:
    """Physical offset just after the last record of the commit log (header walk, no CRC)."""
    files = sorted((store / "commitlog").iterdir())
    end = int(files[0].name) if files else 0
    for f in files:
        base = int(f.name)
        data = f.read_bytes()
        pos = 0
        while pos + 8 <= len(data):
            size, magic = struct.unpack_from(">iI", data, pos)
            if magic in MESSAGE_MAGICS and 0 < size <= len(data) - pos:
                pos += size
                end = base + pos
            elif magic == BLANK_MAGIC:
                break
            else:
                return end if size == 0 else end   # zeros: the written part ends here
        else:
            continue
    return end


@dataclass(frozen=True)
class CommitLogSnapshot:
    end: int
    files: dict[str, str]       # name -> sha256 of its bytes below ``end``

    @classmethod
    def take(cls, store: Path) -> CommitLogSnapshot:
        end = commitlog_end(store)
        digests = {}
        for f in sorted((store / "commitlog").iterdir()):
            base = int(f.name)
            with open(f, "rb") as fh:
                data = fh.read(max(0, min(end - base, f.stat().st_size)))
            digests[f.name] = hashlib.sha256(data).hexdigest()
        return cls(end, digests)

    def lost_in(self, other_store: Path) -> list[str]:
        """Files whose bytes below this snapshot's end differ (or are missing) in ``other_store``."""
        bad = []
        for name, digest in self.files.items():
            f = other_store / "commitlog" / name
            if not f.is_file():
                if int(name) >= self.end:   # a pre-allocated next file with no record: Java's
                    continue                # truncateDirtyFiles deletes it too
                bad.append(f"{name}: missing")
                continue
            base = int(name)
            with open(f, "rb") as fh:
                data = fh.read(max(0, self.end - base))
            if hashlib.sha256(data).hexdigest() != digest:
                bad.append(f"{name}: bytes below offset {self.end} changed")
        return bad


def cq_units(store: Path) -> dict[str, bytes]:
    """Every consume-queue file (relative path) -> its bytes up to the last non-zero unit."""
    out = {}
    root = store / "consumequeue"
    for f in sorted(root.glob("*/*/*")):
        data = f.read_bytes()
        n = len(data) // CQ_UNIT
        while n > 0 and data[(n - 1) * CQ_UNIT:n * CQ_UNIT] == bytes(CQ_UNIT):
            n -= 1
        out[str(f.relative_to(root))] = data[:n * CQ_UNIT]
    return out


def cq_units_lost(before: dict[str, bytes], after_store: Path) -> list[str]:
    """CQ files of ``before`` whose written units are not all still present, byte for byte."""
    after = cq_units(after_store)
    bad = []
    for rel, data in before.items():
        now = after.get(rel)
        if now is None:
            bad.append(f"{rel}: file removed ({len(data) // CQ_UNIT} units)")
        elif now[:len(data)] != data:
            same = next((i for i in range(0, len(data), CQ_UNIT) if now[i:i + CQ_UNIT] != data[i:i + CQ_UNIT]), 0)
            bad.append(f"{rel}: units changed from unit {same // CQ_UNIT} "
                       f"({len(data) // CQ_UNIT} units before, {len(now) // CQ_UNIT} after)")
    return bad
