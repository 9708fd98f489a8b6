"""Batch puts of ``Message`` objects (``CommitLog.putMessages``: one topic and queue, records contiguous,
no delayed and no transactional messages).

``prepare_batch`` covers the common producer batch: no user properties, no sysflag bits, no
delay, one born host. It reads the messages into columns and hands them to
``put_columns.build_columns`` (the encoder ``MessageStore.put_batch`` uses); for anything else,
or what the columns cannot encode, it returns None and the caller takes the general path
(``messages.prepare`` per message, wrapped in ``PreparedList``). Both paths write the same bytes
and refuse the same batches (tests/store/test_put_batch.py, test_put_columns.py); both are an
``EncodedBatch`` (commit_log.py), the one thing ``CommitLog.append`` and the dispatcher take.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate
from operator import attrgetter

from rocketstream import codec
from rocketstream.codec import HostAddress
from rocketstream.store.files.commit_log import TagsCodeOf
from rocketstream.store.write.messages import Message, PreparedMessage
from rocketstream.store.write.put_columns import ColumnBatch, build_columns

_FIELDS = attrgetter("body", "tags", "keys", "properties", "flag", "delay_level", "born_timestamp", "born_host",
                     "sys_flag", "reconsume_times")


def prepare_batch(msgs: Sequence[Message], queue_id: int, *, store_host: HostAddress,
                  max_message_size: int) -> ColumnBatch | None:
    """The batch encoded from columns, or None when the general rules are needed."""
    n = len(msgs)
    if any(m.as_sent or m.broker_copy for m in msgs):   # kept as given by a broker: the general rules
        return None
    bodies, tags, keys, props, flags, delays, born_ts, born_hosts, sys_flags, reconsumes = (
        list(c) for c in zip(*map(_FIELDS, msgs), strict=True))
    if set(map(type, props)) != {dict} or any(props) or any(delays) or any(sys_flags) or any(reconsumes) \
            or set(map(type, bodies)) != {bytes} or born_hosts.count(born_hosts[0]) != n:
        return None
    # list keys and missing born timestamps are build_columns' to read, as they are for put_batch
    return build_columns(msgs[0].topic, queue_id, bodies, tags=tags, keys=keys, flag=flags, born_timestamp=born_ts,
                         born_host=born_hosts[0], store_host=store_host, max_message_size=max_message_size)


class PreparedList:
    """The general path's records (``messages.prepare`` per message), encoded one by one with
    ``codec.encode_record``: an ``EncodedBatch``, like put_columns.ColumnBatch."""

    def __init__(self, records: list[PreparedMessage], store_host: HostAddress) -> None:
        first = records[0]
        self.topic = first.topic
        self.queue_id = first.queue_id
        self.dispatch = first.dispatch
        self.count = len(records)
        self.records = records
        self._store_host = store_host
        self.sizes = [r.size for r in records]
        self.total = sum(self.sizes)
        self.starts = list(accumulate(self.sizes[:-1], initial=0))

    def uniq_keys(self) -> list[str]:
        return [r.uniq_key for r in self.records]

    def index_keys(self) -> tuple[list[str | None], list[str | None] | None]:
        uniq: list[str | None] = []
        keys: list[str | None] = []
        for r in self.records:
            if r.sys_flag & codec.TRANSACTION_MASK == codec.TRANSACTION_ROLLBACK:
                uniq.append(None)
                keys.append(None)
            else:
                uniq.append(r.properties.get(codec.PROPERTY_UNIQ_KEY))
                keys.append(r.properties.get(codec.PROPERTY_KEYS))
        return uniq, keys

    def tags_codes(self, store_timestamp: int, tags_code_of: TagsCodeOf) -> list[int]:
        return [tags_code_of(r.topic, r.properties, store_timestamp) for r in self.records]

    def encode(self, physical_offset: int, queue_offset: int, store_timestamp: int) -> bytes:
        parts = []
        phys, qoff, host = physical_offset, queue_offset, self._store_host
        for m in self.records:
            rec = codec.encode_record(
                topic=m.topic, queue_id=m.queue_id, body=m.body, properties=m.props_bytes, flag=m.flag,
                queue_offset=qoff, physical_offset=phys, sys_flag=m.sys_flag, born_timestamp=m.born_timestamp,
                born_host=m.born_host, store_timestamp=store_timestamp, store_host=host,
                reconsume_times=m.reconsume_times, prepared_transaction_offset=m.prepared_transaction_offset)
            parts.append(rec)
            phys += len(rec)
            if m.dispatch:
                qoff += 1
        return parts[0] if len(parts) == 1 else b"".join(parts)
