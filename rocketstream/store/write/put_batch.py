"""Batch puts of ``Message`` objects (spec 1.8, 1.11).

``prepare_batch`` covers the common producer batch: no user properties, no sysflag bits, no
delay, one born host. It reads the messages into columns and hands them to
``put_columns.build_columns`` (the encoder ``MessageStore.put_batch`` uses); for anything else,
or what the columns cannot encode, it returns None and the caller takes the general path
(``messages.prepare`` per message, wrapped in ``PreparedList``). Both paths write the same bytes
and refuse the same batches (tests/store/test_put_batch.py, test_put_columns.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from operator import attrgetter

from rocketstream import codec
from rocketstream.codec import HostAddress
from rocketstream.store.write.messages import Message, PreparedMessage
from rocketstream.store.write.put_columns import ColumnBatch, build_columns

_NONE = type(None)
_FIELDS = attrgetter("body", "tags", "keys", "properties", "flag", "delay_level", "born_timestamp", "born_host",
                     "sys_flag")


def prepare_batch(msgs: Sequence[Message], queue_id: int, *, store_host: HostAddress,
                  max_message_size: int) -> ColumnBatch | None:
    """The batch encoded from columns, or None when the general rules are needed."""
    n = len(msgs)
    bodies, tags, keys, props, flags, delays, born_ts, born_hosts, sys_flags = (
        list(c) for c in zip(*map(_FIELDS, msgs)))
    if set(map(type, props)) != {dict} or any(props) or any(delays) or any(sys_flags) \
            or set(map(type, bodies)) != {bytes} or born_hosts.count(born_hosts[0]) != n:
        return None
    if None in born_ts:
        now = time.time_ns() // 1_000_000
        born_ts = [now if t is None else t for t in born_ts]
    keys = _keys_text(keys)
    if keys is None:
        return None
    return build_columns(msgs[0].topic, queue_id, bodies, tags=tags, keys=keys, flag=flags, born_timestamp=born_ts,
                         born_host=born_hosts[0], store_host=store_host, max_message_size=max_message_size)


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


class PreparedList:
    """The general path's records (``messages.prepare`` per message), encoded one by one with
    ``format.encode_record``; same interface as put_columns.ColumnBatch."""

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
            rec = codec.encode_record(
                topic=m.topic, queue_id=m.queue_id, body=m.body, properties=m.props_bytes, flag=m.flag,
                queue_offset=qoff, physical_offset=phys, sys_flag=m.sys_flag, born_timestamp=m.born_timestamp,
                born_host=m.born_host, store_timestamp=store_timestamp, store_host=host)
            parts.append(rec)
            phys += len(rec)
            if m.dispatch:
                qoff += 1
        return parts[0] if len(parts) == 1 else b"".join(parts)
