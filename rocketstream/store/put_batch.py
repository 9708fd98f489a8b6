"""A put batch in columns: the broker rewrite (spec 1.6, 1.8, 1.9.2, 1.11) and record encoding
(spec 1.2) done once per batch instead of once per message.

``PreparedBatch`` holds what the commit log and the consume queue need: per-message sizes, body
CRCs, properties, tags codes and UNIQ_KEYs, plus one header template. ``encode`` fills the header
fields known only inside the put lock (physical offset, queue offset, store time) with numpy and
joins header, body, topic + properties length, and properties of every record into the batch.

``prepare_batch`` covers the common producer batch: no user properties, no sysflag bits, no delay,
one born host, ASCII tags and keys. For anything else it returns None and the caller takes the
general path (``messages.prepare`` per message, wrapped in ``PreparedList``); both paths write the
same bytes and refuse the same batches (tests/store/test_put_batch.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial

import numpy as np

from rocketstream.errors import OptionError
from rocketstream.store import format as fmt
from rocketstream.store.format import HostAddress
from rocketstream.store.messages import DEFAULT_BORN_HOST, Message, PreparedMessage, _valid_topic

_INT32 = (-(2**31), 2**31)
_INT64 = (-(2**63), 2**63)
_NONE = type(None)
_PER_MESSAGE = "WAIT\x01true\x02UNIQ_KEY\x01"
_TOPIC_HEAD = partial(fmt._topic_part, v2=False)   # V1: the topic passed _valid_topic (<= 127 ASCII)


def _varying_dtype(head_size: int) -> np.dtype:
    """The header fields that differ between records of one batch, at their record offsets."""
    return np.dtype({
        "names": ["total", "crc", "flag", "queue_offset", "physical_offset", "born_ts", "body_len"],
        "formats": [">i4", ">i4", ">i4", ">i8", ">i8", ">i8", ">i4"],
        "offsets": [fmt.POS_TOTAL_SIZE, fmt.POS_BODY_CRC, fmt.POS_FLAG, fmt.POS_QUEUE_OFFSET,
                    fmt.POS_PHYSICAL_OFFSET, fmt.POS_BORN_TIMESTAMP, head_size - 4],
        "itemsize": head_size})


_VARYING = {size: _varying_dtype(size) for size in {s.size for s in fmt._FIXED.values()}}


class PreparedBatch:
    """Records of one put (same topic and queue), ready to encode at a commit-log position."""

    def __init__(self, *, topic: str, queue_id: int, dispatch: bool, bodies: list, mids: list[bytes],
                 props: list[bytes], props_lens: list[int],
                 crcs: np.ndarray, flags: np.ndarray, born_ts: np.ndarray, sys_flag: int, born_host: HostAddress,
                 store_host: HostAddress, uniq_keys: list[str], tags_codes: list[int]) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.dispatch = dispatch
        self.count = len(bodies)
        self.uniq_keys = uniq_keys
        self._bodies = bodies
        self._mids = mids
        self._props = props
        self._crcs = crcs
        self._flags = flags
        self._born_ts = born_ts
        self._sys_flag = sys_flag
        self._born_host = born_host
        self._store_host = store_host
        self._tags_codes = tags_codes
        self._born_ip = fmt._pack_ip(born_host[0])
        self._store_ip = fmt._pack_ip(store_host[0])
        born_v6, store_v6 = len(self._born_ip) == 16, len(self._store_ip) == 16
        self._fixed = fmt._FIXED[born_v6, store_v6]
        self._sys_flag = (sys_flag & ~(fmt.FLAG_BORNHOST_V6 | fmt.FLAG_STOREHOST_V6)) \
            | (fmt.FLAG_BORNHOST_V6 if born_v6 else 0) | (fmt.FLAG_STOREHOST_V6 if store_v6 else 0)
        self.body_lens = np.fromiter(map(len, bodies), dtype=np.int64, count=self.count)
        self.sizes = (self._fixed.size + len(mids[0])) + self.body_lens + np.array(props_lens, dtype=np.int64)
        self.total = int(self.sizes.sum())
        self.starts = np.empty(self.count, dtype=np.int64)   # of each record, relative to the first
        self.starts[0] = 0
        np.cumsum(self.sizes[:-1], out=self.starts[1:])

    def tags_codes(self, store_timestamp: int, tags_code_of) -> list[int]:
        """CQ tags codes (TAGS hashes; the batch has no SCHEDULE_TOPIC_XXXX records)."""
        return self._tags_codes

    def encode(self, physical_offset: int, queue_offset: int, store_timestamp: int) -> bytes:
        """The batch's bytes for a first record at ``physical_offset`` with queue offset ``queue_offset``."""
        n = self.count
        fixed = self._fixed
        try:
            template = fixed.pack(0, fmt.MAGIC_V1, 0, self.queue_id, 0, 0, 0, self._sys_flag, 0, self._born_ip,
                                  self._born_host[1], store_timestamp, self._store_ip, self._store_host[1], 0, 0, 0)
        except Exception as exc:  # struct.error: a field out of range (encode_record's message)
            raise OptionError("record", f"a field is out of range for its int32/int64 slot: {exc}") from exc
        head = np.empty((n, fixed.size), dtype=np.uint8)
        head[:] = np.frombuffer(template, dtype=np.uint8)
        cols = head.view(_VARYING[fixed.size])[:, 0]
        cols["total"] = self.sizes
        cols["crc"] = self._crcs
        cols["flag"] = self._flags
        cols["queue_offset"] = np.arange(queue_offset, queue_offset + n, dtype=np.int64) if self.dispatch \
            else 0
        cols["physical_offset"] = self.starts + physical_offset
        cols["born_ts"] = self._born_ts
        cols["body_len"] = self.body_lens
        hb = head.tobytes()
        step = fixed.size
        parts: list = [None] * (4 * n)
        parts[0::4] = [hb[i:i + step] for i in range(0, n * step, step)]
        parts[1::4] = self._bodies
        parts[2::4] = self._mids
        parts[3::4] = self._props
        return b"".join(parts)


def prepare_batch(msgs: Sequence[Message], queue_id: int, *, store_host: HostAddress,
                  max_message_size: int) -> PreparedBatch | None:
    """The batch rewrite for plain producer batches, or None when the general rules are needed."""
    topic = msgs[0].topic
    if type(topic) is not str or not _valid_topic(topic) or topic == fmt.SCHEDULE_TOPIC \
            or type(queue_id) is not int or not 0 <= queue_id < 2**31:
        return None
    n = len(msgs)
    bodies = [m.body for m in msgs]
    tags = [m.tags for m in msgs]
    keys = [m.keys for m in msgs]
    props = [m.properties for m in msgs]
    flags = [m.flag for m in msgs]
    delays = [m.delay_level for m in msgs]
    born_ts = [m.born_timestamp for m in msgs]
    born_hosts = [m.born_host for m in msgs]
    sys_flags = [m.sys_flag for m in msgs]
    if set(map(type, props)) != {dict} or any(props) or any(delays) or any(sys_flags) \
            or set(map(type, bodies)) != {bytes} or max(map(len, bodies)) > max_message_size:
        return None
    if set(map(type, flags)) != {int} or min(flags) < _INT32[0] or max(flags) >= _INT32[1]:
        return None
    born_host = born_hosts[0]
    if born_hosts.count(born_host) != n:
        return None
    try:
        born_host = HostAddress(*born_host) if born_host else DEFAULT_BORN_HOST
        fmt._pack_ip(born_host[0])
        fmt._pack_ip(store_host[0])
    except (OptionError, TypeError):
        return None
    if not (type(born_host[1]) is int and 0 <= born_host[1] <= 0xFFFF and 0 <= store_host[1] <= 0xFFFF):
        return None
    ts_types = set(map(type, born_ts))
    if not ts_types <= {int, _NONE}:
        return None
    if _NONE in ts_types:
        now = time.time_ns() // 1_000_000
        born_ts = [now if t is None else t for t in born_ts]
    if min(born_ts) < _INT64[0] or max(born_ts) >= _INT64[1]:
        return None
    keys = _keys_text(keys)
    if keys is None or not _plain_texts(tags, keys):
        return None
    uniq = fmt.new_uniq_keys(n)
    props = _properties(tags, keys, uniq)
    lens = list(map(len, props))
    if max(lens) > fmt.MAX_PROPERTIES_LENGTH:
        return None
    mid = {length: _TOPIC_HEAD(topic) + length.to_bytes(2, "big") for length in set(lens)}
    crcs = np.array(list(map(fmt.crc32, bodies)), dtype=np.int64) & 0x7FFFFFFF
    codes = {t: fmt.java_hash(t) if t else 0 for t in set(tags)}
    tags_codes = list(map(codes.__getitem__, tags))
    return PreparedBatch(topic=topic, queue_id=queue_id, dispatch=True, bodies=bodies,
                         mids=list(map(mid.__getitem__, lens)), props=props, props_lens=lens, crcs=crcs,
                         flags=np.array(flags, dtype=np.int64), born_ts=np.array(born_ts, dtype=np.int64),
                         sys_flag=0, born_host=born_host, store_host=store_host, uniq_keys=uniq,
                         tags_codes=tags_codes)


def _keys_text(keys: list) -> list | None:
    """KEYS as prepare() writes them (a list joined with spaces); None for non-string keys."""
    types = set(map(type, keys))
    if types <= {str, _NONE}:
        return keys
    if not types <= {str, _NONE, list, tuple} or not all(type(x) is str for k in keys if type(k) is not str and k
                                                        for x in k):
        return None
    joined = [k if type(k) is str or not k else " ".join(k) for k in keys]
    # prepare() writes an empty KEYS entry for a non-empty list that joins to ""; leave that to it
    return None if any(k and not j for k, j in zip(keys, joined)) else joined


def _plain_texts(tags: list, keys: list) -> bool:
    """Tags and keys are str/None, ASCII (so a character is a byte) and hold no separator; the
    general path handles (and reports) everything else."""
    if not set(map(type, tags)) <= {str, _NONE}:
        return False
    text = "".join(filter(None, tags)) + "".join(filter(None, keys))
    return text.isascii() and "\x01" not in text and "\x02" not in text


def _properties(tags: list, keys: list, uniq: list[str]) -> list[bytes]:
    """PROPERTIES in prepare()'s order: TAGS, KEYS (when set), WAIT, UNIQ_KEY."""
    if all(tags) and all(keys):
        texts = [f"TAGS\x01{t}\x02KEYS\x01{k}\x02{_PER_MESSAGE}{u}\x02" for t, k, u in zip(tags, keys, uniq)]
    else:
        texts = [(f"TAGS\x01{t}\x02" if t else "") + (f"KEYS\x01{k}\x02" if k else "") + f"{_PER_MESSAGE}{u}\x02"
                 for t, k, u in zip(tags, keys, uniq)]
    return [t.encode("ascii") for t in texts]


class PreparedList:
    """The general path's records (``messages.prepare`` per message), encoded one by one with
    ``format.encode_record``; same interface as PreparedBatch."""

    def __init__(self, records: list[PreparedMessage], store_host: HostAddress) -> None:
        first = records[0]
        self.topic = first.topic
        self.queue_id = first.queue_id
        self.dispatch = first.dispatch
        self.count = len(records)
        self.uniq_keys = [r.uniq_key for r in records]
        self.records = records
        self._store_host = store_host
        self.sizes = [r.size for r in records]
        self.total = sum(self.sizes)
        self.starts = [0] * self.count
        for i in range(1, self.count):
            self.starts[i] = self.starts[i - 1] + self.sizes[i - 1]

    def tags_codes(self, store_timestamp: int, tags_code_of) -> list[int]:
        return [tags_code_of(r.topic, r.properties, store_timestamp) for r in self.records]

    def encode(self, physical_offset: int, queue_offset: int, store_timestamp: int) -> bytes:
        parts = []
        phys, qoff, host = physical_offset, queue_offset, self._store_host
        for m in self.records:
            rec = fmt.encode_record(
                topic=m.topic, queue_id=m.queue_id, body=m.body, properties=m.props_bytes, flag=m.flag,
                queue_offset=qoff, physical_offset=phys, sys_flag=m.sys_flag, born_timestamp=m.born_timestamp,
                born_host=m.born_host, store_timestamp=store_timestamp, store_host=host)
            parts.append(rec)
            phys += len(rec)
            if m.dispatch:
                qoff += 1
        return parts[0] if len(parts) == 1 else b"".join(parts)
