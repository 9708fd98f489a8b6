"""Issue 10, "Done when", on stores written by the real Apache RocketMQ 4.9.8 broker.

For each variant (clean shutdown, killed broker with ``abort``, after the broker's own retention deleted
the oldest commit-log files, every file older than 72 h) and always on COPIES of the session's stores:

* ``check`` on the untouched copy reports zero problems;
* every read path (read_range, get_message, look-up by commit-log offset, look-up by message id and
  by key) returns exactly what the Java client read (the oracle of ``RealStorePeer read``);
* a writer open and ``rocketstream produce --topic NewT --count 3`` keep every existing message
  (same max offset per queue, commit-log bytes identical below the old end, every CQ unit still
  there), ``check`` passes after, and reads still match the oracle;
* a Java broker started on the store our writer touched serves our 3 new messages and all old ones.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest

from rocketstream import cli
from rocketstream.store import MessageStore
from tests.realbroker import make_store, peers, storefiles

VARIANTS = make_store.VARIANTS
NEW_TOPIC = "NewT"

# fields compared with the Java client's MessageExt (RealStorePeer.message); the body as length + sha256
FIELDS = ("topic", "queueId", "queueOffset", "msgId", "offsetMsgId", "commitLogOffset", "storeSize", "tags",
          "keys", "bodyLength", "bodySha256", "properties", "bornTimestamp", "bornHost", "storeTimestamp",
          "storeHost", "sysFlag", "bodyCRC", "reconsumeTimes", "flag", "preparedTransactionOffset")
Key = tuple  # (topic, queueId, queueOffset)


# --------------------------------------------------------------------------------------- helpers
def _body_fields(body: bytes) -> dict:
    return {"bodyLength": len(body), "bodySha256": hashlib.sha256(body).hexdigest()}


def rows_from_batches(batches) -> list[dict]:
    rows = []
    for b in batches:
        cols = {}
        for name in b.schema.names:
            col = b.column(name)
            if pa.types.is_timestamp(col.type):
                col = col.cast(pa.int64())   # microseconds since the epoch
                cols[name] = [v // 1000 for v in col.to_pylist()]
            else:
                cols[name] = col.to_pylist()
        for i in range(b.num_rows):
            r = {k: v[i] for k, v in cols.items()}
            r.update(_body_fields(r.pop("body")))
            r["properties"] = dict(r["properties"])
            rows.append({k: r[k] for k in FIELDS})
    return rows


def row_from_record(rec) -> dict:
    r = {"topic": rec.topic, "queueId": rec.queue_id, "queueOffset": rec.queue_offset, "msgId": rec.msg_id,
         "offsetMsgId": rec.offset_msg_id, "commitLogOffset": rec.physical_offset, "storeSize": rec.total_size,
         "tags": rec.tags, "keys": rec.keys, "properties": dict(rec.properties),
         "bornTimestamp": rec.born_timestamp, "bornHost": str(rec.born_host), "storeTimestamp": rec.store_timestamp,
         "storeHost": str(rec.store_host), "sysFlag": rec.sys_flag, "bodyCRC": rec.body_crc,
         "reconsumeTimes": rec.reconsume_times, "flag": rec.flag,
         "preparedTransactionOffset": rec.prepared_transaction_offset}
    r.update(_body_fields(rec.uncompressed_body()))
    return {k: r[k] for k in FIELDS}


def row_from_cli(row: dict) -> dict:
    r = dict(row)
    r.update(_body_fields(base64.b64decode(r.pop("body"))))
    return {k: r[k] for k in FIELDS}


def key_of(r: dict) -> Key:
    return (r["topic"], r["queueId"], r["queueOffset"])


def compare(expected: dict[Key, dict], actual: list[dict], what: str) -> list[str]:
    """Differences between the Java client's messages and ours, as readable lines (empty = equal)."""
    got: dict[Key, dict] = {}
    dup = []
    for r in actual:
        if key_of(r) in got:
            dup.append(key_of(r))
        got[key_of(r)] = r
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    out = []
    if missing:
        out.append(f"{what}: {len(missing)} of the Java client's {len(expected)} messages missing, e.g. {missing[:5]}")
    if extra:
        out.append(f"{what}: {len(extra)} messages the Java client does not read, e.g. {extra[:5]}")
    if dup:
        out.append(f"{what}: {len(dup)} messages returned twice, e.g. {dup[:5]}")
    bad = Counter()
    examples = []
    for k in sorted(set(expected) & set(got)):
        e, a = expected[k], got[k]
        for f in FIELDS:
            if e[f] != a[f]:
                bad[f] += 1
                if len(examples) < 5:
                    examples.append(f"  {k} {f}: java={e[f]!r} ours={a[f]!r}")
    if bad:
        out.append(f"{what}: field mismatches {dict(bad)}\n" + "\n".join(examples))
    return out


def fail_if(problems: list[str]) -> None:
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@dataclass
class Oracle:
    queues: dict[tuple[str, int], dict]
    messages: dict[Key, dict]

    @classmethod
    def load(cls, path: Path) -> Oracle:
        queues, msgs = make_store.load_oracle(path)
        return cls(queues, {key_of(m): {f: m.get(f) for f in FIELDS} for m in msgs})   # fastjson omits nulls

    def nonempty_queues(self) -> dict[tuple[str, int], dict]:
        return {k: q for k, q in self.queues.items() if k[1] >= 0 and q["maxOffset"] > 0}

    def of_queue(self, topic: str, qid: int) -> dict[Key, dict]:
        return {k: m for k, m in self.messages.items() if k[0] == topic and k[1] == qid}


def queue_problems(store: MessageStore, oracle: Oracle) -> list[str]:
    """Same queues with messages, same max offset each, and a min offset that agrees with Java's
    wherever Java has a message at its min (Java's min can stay on expired units: correctMinOffset
    only looks into a queue's first CQ file)."""
    out = []
    ours = {(t, q) for t in store.topics() for q in store.queue_ids(t)
            if store.max_offset(t, q) > 0 and t != NEW_TOPIC}
    java = set(oracle.nonempty_queues())
    if ours - java:
        out.append(f"queues with messages that the Java broker does not have: {sorted(ours - java)}")
    if java - ours:
        out.append(f"queues the Java broker serves that we do not: {sorted(java - ours)}")
    for (t, q), jq in sorted(oracle.nonempty_queues().items()):
        if (t, q) not in ours:
            continue
        mx, mn = store.max_offset(t, q), store.min_offset(t, q)
        if mx != jq["maxOffset"]:
            out.append(f"{t}/{q}: max offset {mx}, Java broker {jq['maxOffset']}")
        if (t, q, jq["minOffset"]) in oracle.messages and mn != jq["minOffset"]:
            out.append(f"{t}/{q}: min offset {mn}, Java broker {jq['minOffset']}")
        elif mn < jq["minOffset"]:
            out.append(f"{t}/{q}: min offset {mn} below the Java broker's {jq['minOffset']}")
    return out


def read_all(store: MessageStore, oracle: Oracle) -> tuple[list[dict], list[str]]:
    rows, errors = [], []
    for (t, q) in sorted(oracle.nonempty_queues()):
        if q not in store.queue_ids(t):
            continue
        try:
            rows += rows_from_batches(store.read_range(t, q, store.min_offset(t, q), store.max_offset(t, q)))
        except Exception as e:  # a read path that raises on a healthy store is the failure being tested
            errors.append(f"read_range({t}/{q}) raised {type(e).__name__}: {str(e).splitlines()[0]}")
    return rows, errors


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(argv))
        except SystemExit as e:   # argparse errors
            code = e.code if isinstance(e.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"


# -------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module", params=VARIANTS)
def variant(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def real(real_stores, variant) -> make_store.RealStore:
    return real_stores[variant]


@pytest.fixture(scope="module")
def oracle(real) -> Oracle:
    o = Oracle.load(real.oracle)
    assert o.messages, f"the Java client read no message of the {real.variant} store"
    return o


@pytest.fixture(scope="module")
def ro_copy(real, copy_of) -> Path:
    """A copy for the read-only tests (read paths must not need to write, but never risk the original)."""
    return copy_of(real.root, f"ro-{real.variant}")


@pytest.fixture(scope="module")
def ro_store(ro_copy):
    s = MessageStore.open(ro_copy, read_only=True)
    yield s
    s.close()


@dataclass
class WriterRun:
    root: Path
    before_cl: storefiles.CommitLogSnapshot
    before_cq: dict[str, bytes]
    open_error: str | None = None
    after_open_cl: list[str] = field(default_factory=list)
    after_open_cq: list[str] = field(default_factory=list)
    after_open_queues: list[str] = field(default_factory=list)
    produce: tuple[int, str, str] = (0, "", "")
    produce_error: str | None = None
    after_produce_cl: list[str] = field(default_factory=list)
    after_produce_cq: list[str] = field(default_factory=list)
    after_produce_queues: list[str] = field(default_factory=list)


def _queues_now(root: Path, oracle: Oracle) -> list[str]:
    try:
        with MessageStore.open(root, read_only=True) as s:
            return queue_problems(s, oracle)
    except Exception as e:
        return [f"read-only open after the writer raised {first_line(e)}"]


@pytest.fixture(scope="module")
def written(real, oracle, copy_of) -> WriterRun:
    """A copy opened by a writer (MessageStore.open, closed) and then by ``rocketstream produce --store
    COPY --topic NewT --count 3``, with what was lost after each step."""
    root = copy_of(real.root, f"w-{real.variant}")
    run = WriterRun(root, storefiles.CommitLogSnapshot.take(root), storefiles.cq_units(root))
    try:
        MessageStore.open(root).close()
    except Exception as e:
        run.open_error = first_line(e)
    run.after_open_cl = run.before_cl.lost_in(root)
    run.after_open_cq = storefiles.cq_units_lost(run.before_cq, root)
    run.after_open_queues = _queues_now(root, oracle)
    try:
        run.produce = run_cli("produce", "--store", str(root), "--topic", NEW_TOPIC, "--count", "3")
    except Exception as e:
        run.produce_error = first_line(e)
    run.after_produce_cl = run.before_cl.lost_in(root)
    run.after_produce_cq = storefiles.cq_units_lost(run.before_cq, root)
    run.after_produce_queues = _queues_now(root, oracle)
    return run


# ------------------------------------------------------------------------- the untouched copies
def test_fixture_store_has_the_intended_shape(real, oracle):
    """Guards the generator: several commit-log and CQ files, compressed bodies, batches, retry and
    schedule traffic, committed offsets; retention actually deleted files."""
    cl = make_store.commitlog_files(real.root)
    assert len(cl) >= (2 if real.variant == "retention" else 4), f"commit-log files: {cl}"
    msgs = list(oracle.messages.values())
    topics = Counter(m["topic"] for m in msgs)
    assert any(t.startswith("%RETRY%") for t in topics), f"no retry traffic: {topics}"
    assert topics["SCHEDULE_TOPIC_XXXX"] > 0, f"no schedule traffic: {topics}"
    assert any(m["sysFlag"] & 0x1 for m in msgs), "no compressed body (SYSFLAG 0x1)"
    assert any(" " in (m["keys"] or "") for m in msgs), "no message with several keys"
    assert (real.root / "config" / "consumerOffset.json").is_file()
    assert (real.root / "abort").exists() == (real.variant == "abort")
    cq_files = Counter(p.parent for p in (real.root / "consumequeue").glob("*/*/*"))
    assert max(cq_files.values()) >= 3, f"CQ files per queue: {max(cq_files.values())}"
    if real.variant == "retention":
        assert real.info["deleted_by_broker"] and not set(real.info["deleted_by_broker"]) & set(cl)
        assert int(cl[0]) > 0, "the broker's retention did not delete the first commit-log file"


def test_check_on_untouched_copy_reports_no_problems(ro_store, oracle):
    report = ro_store.check()
    assert report.ok, (f"check found {len(report.problems)} problems on a healthy 4.9.8 store, first ones:\n"
                       + "\n".join(str(p) for p in report.problems[:5]))
    assert report.records >= len(oracle.messages), (
        f"check verified {report.records} records; the Java client read {len(oracle.messages)}")


def test_queue_offsets_match_java_broker(ro_store, oracle):
    fail_if(queue_problems(ro_store, oracle))


def test_read_range_matches_java_client(ro_store, oracle):
    rows, errors = read_all(ro_store, oracle)
    fail_if(errors + compare(oracle.messages, rows, "read_range"))


def test_get_message_matches_java_client(ro_store, oracle):
    """The pull path (DefaultMessageStore.getMessage equivalent), followed like a pull consumer does:
    from the min offset, on to nextBeginOffset, until the max offset."""
    rows, errors = [], []
    for (t, q) in sorted(oracle.nonempty_queues()):
        if q not in ro_store.queue_ids(t):
            continue
        offset, end = ro_store.min_offset(t, q), ro_store.max_offset(t, q)
        for _ in range(100000):
            if offset >= end:
                break
            try:
                res = ro_store.get_message("realstore-test", t, q, offset, 32)
            except Exception as e:
                errors.append(f"get_message({t}/{q}@{offset}) raised {first_line(e)}")
                break
            rows += [row_from_record(m) for m in res.messages]
            if res.next_begin_offset <= offset:
                errors.append(f"get_message({t}/{q}@{offset}) did not advance: {res.status.name}")
                break
            offset = res.next_begin_offset
    fail_if(errors + compare(oracle.messages, rows, "get_message"))


def test_lookup_by_commit_log_offset_matches_java_client(ro_store, oracle):
    rows, errors = [], []
    for m in oracle.messages.values():
        try:
            rows.append(row_from_record(ro_store.look_message_by_offset(m["commitLogOffset"], m["storeSize"])))
        except Exception as e:
            errors.append(f"look_message_by_offset({m['commitLogOffset']}) raised {first_line(e)}")
    fail_if(errors[:10] + compare(oracle.messages, rows, "look_message_by_offset"))


def _unique_by(oracle: Oracle, field_name: str) -> list[dict]:
    counts = Counter(m[field_name] for m in oracle.messages.values())
    return [m for k, m in sorted(oracle.messages.items()) if counts[m[field_name]] == 1]


def test_message_by_msg_id_matches_java_client(ro_store, oracle):
    """Look-up by UNIQ_KEY (a sample of every 10th message whose id is unique in the store) and by
    offset message id (every 25th)."""
    rows, errors = [], []
    expected = {}
    for m in _unique_by(oracle, "msgId")[::10]:
        expected[key_of(m)] = m
        try:
            rows.append(row_from_record(ro_store.message_by_msg_id(m["msgId"])))
        except Exception as e:
            errors.append(f"message_by_msg_id({m['msgId']}) of {key_of(m)} raised {first_line(e)}")
    for m in list(oracle.messages.values())[::25]:
        try:
            r = row_from_record(ro_store.message_by_msg_id(m["offsetMsgId"]))
        except Exception as e:
            errors.append(f"message_by_msg_id(offsetMsgId {m['offsetMsgId']}) raised {first_line(e)}")
            continue
        if r != m:
            errors.append(f"offsetMsgId {m['offsetMsgId']} found {key_of(r)}, Java has {key_of(m)}")
    problems = [f"{len(errors)} look-ups failed, first ones:"] + errors[:8] if errors else []
    fail_if(problems + compare(expected, rows, "message_by_msg_id"))


def _cli_sample(oracle: Oracle) -> list[dict]:
    """A few messages of every kind: compressed, batched, retried, delivered from the schedule topic,
    the schedule-topic record itself."""
    unique = _unique_by(oracle, "msgId")
    picks = {}
    for name, pred in [("compressed", lambda m: m["sysFlag"] & 1),
                       ("batch", lambda m: m["topic"].endswith("Batch")),
                       ("retry", lambda m: m["topic"].startswith("%RETRY%")),
                       ("delayed", lambda m: m["properties"].get("delayed") == "true"
                        and m["topic"] != "SCHEDULE_TOPIC_XXXX"),
                       ("plain", lambda m: m["topic"].endswith("Events"))]:
        hit = next((m for m in unique if pred(m)), None) or next((m for m in oracle.messages.values() if pred(m)),
                                                                 None)
        if hit is not None:
            picks[name] = hit
    return list(picks.values())


def test_cli_query_msg_by_msg_id_matches_java_client(ro_copy, oracle):
    errors = []
    for m in _cli_sample(oracle):
        for ident in (m["msgId"], m["offsetMsgId"]):
            code, out, err = run_cli("query-msg", "--store", str(ro_copy), "--msg-id", ident, "--json")
            if code != 0:
                errors.append(f"query-msg --msg-id {ident} ({key_of(m)}): exit {code}: {err.strip()[:200]}")
                continue
            row = row_from_cli(json.loads(out))
            if ident == m["offsetMsgId"] or len([x for x in oracle.messages.values() if x["msgId"] == ident]) == 1:
                if row != m:
                    diff = {f: (m[f], row[f]) for f in FIELDS if m[f] != row[f]}
                    errors.append(f"query-msg --msg-id {ident}: differs from the Java client: {diff}")
            elif row["msgId"] != ident:
                errors.append(f"query-msg --msg-id {ident} returned msgId {row['msgId']}")
    fail_if(errors)


def test_cli_query_msg_by_key_matches_java_client(ro_copy, oracle):
    """``query-msg --topic T --key K`` (the broker's queryMessage over the index, IndexService.queryOffset): every
    message of T whose KEYS hold K - a unique key, and a non-ASCII key."""
    msgs = [m for m in oracle.messages.values() if m["keys"] and not m["topic"].startswith(("%", "SCHEDULE"))]
    plain = msgs[len(msgs) // 2]
    accented = next(m for m in msgs if "kü-" in m["keys"])
    errors = []
    for m, k in [(plain, plain["keys"].split(" ")[0]), (accented, next(x for x in accented["keys"].split(" ")
                                                                        if x.startswith("kü-")))]:
        expected = {x["offsetMsgId"] for x in oracle.messages.values()
                    if x["topic"] == m["topic"] and k in (x["keys"] or "").split(" ")}
        code, out, err = run_cli("query-msg", "--store", str(ro_copy), "--topic", m["topic"], "--key", k, "--json")
        if code != 0:
            errors.append(f"query-msg --topic {m['topic']} --key {k}: exit {code}: {err.strip()[:300]}")
            continue
        doc = json.loads(out)
        rows = doc if isinstance(doc, list) else doc.get("messages", [doc]) if isinstance(doc, dict) else []
        got = {r["offsetMsgId"] for r in rows}
        if got != expected:
            errors.append(f"query-msg --key {k}: offsetMsgIds {sorted(got)}, Java {sorted(expected)}")
    fail_if(errors)


# ----------------------------------------------------------------------------------- writers
def test_writer_open_keeps_every_message(written):
    fail_if(([f"MessageStore.open(copy) raised {written.open_error}"] if written.open_error else [])
            + [f"commit log after a writer open: {x}" for x in written.after_open_cl]
            + [f"consume queue after a writer open: {x}" for x in written.after_open_cq[:10]]
            + [f"after a writer open: {x}" for x in written.after_open_queues[:10]])


def test_cli_produce_keeps_every_message_and_adds_three(written):
    code, out, err = written.produce
    problems = []
    if written.produce_error:
        problems.append(f"rocketstream produce raised {written.produce_error}")
    elif code != 0:
        problems.append(f"rocketstream produce exit {code}: {err.strip()[:300]}")
    problems += [f"commit log after produce: {x}" for x in written.after_produce_cl]
    problems += [f"consume queue after produce: {x}" for x in written.after_produce_cq[:10]]
    problems += [f"after produce: {x}" for x in written.after_produce_queues[:10]]
    fail_if(problems)
    with MessageStore.open(written.root, read_only=True) as s:
        n = sum(s.max_offset(NEW_TOPIC, q) - s.min_offset(NEW_TOPIC, q) for q in s.queue_ids(NEW_TOPIC))
        assert n == 3, f"{NEW_TOPIC} holds {n} messages after produce --count 3"
        assert s.commit_log_max_offset() > written.before_cl.end, "produce did not append to the commit log"


def test_check_after_writer_reports_no_problems(written, oracle):
    with MessageStore.open(written.root, read_only=True) as s:
        report = s.check()
    # a check of a store the writer emptied would pass vacuously
    assert report.records >= len(oracle.messages) + 3, (
        f"check saw {report.records} records after produce; the Java client read {len(oracle.messages)} "
        f"before and produce added 3")
    assert report.ok, (f"check found {len(report.problems)} problems after produce, first ones:\n"
                       + "\n".join(str(p) for p in report.problems[:5]))


def test_reads_after_writer_match_java_client(written, oracle):
    with MessageStore.open(written.root, read_only=True) as s:
        rows, errors = read_all(s, oracle)
        new = []
        for q in s.queue_ids(NEW_TOPIC):
            new += rows_from_batches(s.read_range(NEW_TOPIC, q, s.min_offset(NEW_TOPIC, q), s.max_offset(NEW_TOPIC, q)))
    problems = errors + compare(oracle.messages, rows, "read_range after produce")
    if len(new) != 3:
        problems.append(f"read_range({NEW_TOPIC}) returned {len(new)} messages, produce wrote 3")
    fail_if(problems)


def test_java_broker_reads_our_writes_and_all_old_messages(written, oracle, real, peer_classes, copy_of,
                                                           tmp_path):
    """Start a 4.9.8 broker on (a copy of) the store our writer touched and read everything with the
    Java client: the old messages exactly as before, and our 3 new ones exactly as we read them."""
    store = copy_of(written.root, f"java-after-{real.variant}")
    with MessageStore.open(store, read_only=True) as s:
        ours_new = []
        for q in s.queue_ids(NEW_TOPIC):
            ours_new += rows_from_batches(s.read_range(NEW_TOPIC, q, s.min_offset(NEW_TOPIC, q),
                                                       s.max_offset(NEW_TOPIC, q)))
    topics = sorted({t for t, _ in oracle.queues} | {NEW_TOPIC})
    with peers.Cluster(tmp_path / "java", store) as c:
        out = peers.read_oracle(peer_classes, c.namesrv_addr, topics, tmp_path / "after.jsonl", home=tmp_path / "java")
    after = Oracle.load(out)
    problems = [f"Java client could not read {k[0]}: {q['error']}" for k, q in after.queues.items() if k[1] < 0]
    problems += [f"Java broker failed a pull of {k[0]}/{k[1]}: {s}" for k, q in sorted(after.queues.items())
                 if k[1] >= 0 for s in q.get("pullStatuses", []) if s.startswith("ERROR")][:5]
    old = {k: m for k, m in after.messages.items() if k[0] != NEW_TOPIC}
    problems += [p.replace("read_range", "Java after our writer") for p in compare(oracle.messages, list(old.values()),
                                                                                   "read_range")]
    new = [m for k, m in after.messages.items() if k[0] == NEW_TOPIC]
    problems += compare({key_of(r): r for r in ours_new}, new, f"Java reading {NEW_TOPIC} vs our read_range")
    if len(new) != 3:
        problems.append(f"the Java client read {len(new)} messages of {NEW_TOPIC}, we wrote 3")
    fail_if(problems)


# ------------------------------------------------------- index/ (IndexFile, IndexService.queryOffset)
def test_index_files_hold_every_key_java_indexed(ro_copy, oracle, monkeypatch):
    """The broker's own index files read with our IndexFile: the geometry of the fixture's
    broker.conf (maxHashSlotNum 100,000, maxIndexNum 400,000), found from the bytes alone too, and an
    entry (hash of topic#key, commit-log offset) for UNIQ_KEY and every key of every message the Java
    client read."""
    from rocketstream.store.files import index_file
    from rocketstream.store.files.index_file import IndexService, build_key, index_key_hash

    paths = sorted((ro_copy / "index").iterdir())
    assert paths, "a 4.9.8 store without index/ files"
    with monkeypatch.context() as m:    # no 1:4 ratio to lean on: a wrong candidate, then the bytes decide
        m.setattr(index_file, "_DEFAULT_RATIO", 1)
        m.setattr(index_file, "_GEOMETRY_CACHE", {})
        with IndexService(paths) as index:
            assert [(f.geometry.max_hash_slot_num, f.geometry.source) for f in index.files] == [
                (100_000, "data")] * len(paths)
    with IndexService(paths) as index:
        geometry = {(f.geometry.max_hash_slot_num, f.geometry.max_index_num) for f in index.files if f.geometry}
        assert geometry == {(100_000, 400_000)}
        entries = set()
        for f in index.files:
            e = f.entries()
            entries |= set(zip(e["key_hash"].tolist(), e["phy_offset"].tolist(), strict=True))
            del e
        begin = min(f.read_header().begin_phy_offset for f in index.files)
        end = index.indexed_end()
    missing = []
    for m in oracle.messages.values():
        if not begin <= m["commitLogOffset"] <= end:
            continue
        keys = [k for k in (m["keys"] or "").split(" ") if k] + [m["properties"].get("UNIQ_KEY")] * (
            "UNIQ_KEY" in m["properties"])
        missing += [(m["topic"], k, m["commitLogOffset"]) for k in keys
                    if (index_key_hash(build_key(m["topic"], k)), m["commitLogOffset"]) not in entries]
    assert not missing, f"{len(missing)} keys of messages the Java client read are not in the index: {missing[:5]}"


def test_query_message_matches_java_client_for_every_key(ro_store, oracle):
    """MessageStore.query_message for every key of every message (every topic, retry and schedule
    topics included) and by UNIQ_KEY: the messages of that topic holding the key, as the Java client's
    key check (MQAdminImpl.queryMessage) keeps them."""
    by_key: dict[tuple[str, str], set[int]] = {}
    for m in oracle.messages.values():
        for k in {k for k in (m["keys"] or "").split(" ") if k}:
            by_key.setdefault((m["topic"], k), set()).add(m["commitLogOffset"])
    errors = []
    cl_min = ro_store.commit_log_min_offset()
    for (topic, k), expected in sorted(by_key.items()):
        got = [r.physical_offset for r in ro_store.query_message(topic, k)]
        want = sorted(o for o in expected if o >= cl_min)[-64:]
        if got != want:
            errors.append(f"query_message({topic!r}, {k!r}): {got[:5]}... ({len(got)}), "
                          f"Java {want[:5]}... ({len(want)})")
    for m in list(oracle.messages.values())[::7]:
        uniq = m["properties"].get("UNIQ_KEY")
        if uniq and m["commitLogOffset"] >= cl_min:
            got = [r.physical_offset for r in ro_store.query_message(m["topic"], uniq, uniq_key=True)]
            if m["commitLogOffset"] not in got:
                errors.append(f"query_message({m['topic']!r}, UNIQ_KEY {uniq}): {got}, Java {m['commitLogOffset']}")
    assert len(by_key) > 100, f"only {len(by_key)} keys in the fixture store"
    fail_if(errors[:10])


def test_query_message_after_writer_finds_keys_through_the_index(written):
    """Our writer continues the broker's index files: its records are in them, nothing is left for the
    tail scan ("rocketstream produce" gives message i the key key-i)."""
    from rocketstream.store.files.index_file import IndexService
    from rocketstream.store.maintenance.layout import index_files

    with MessageStore.open(written.root, read_only=True) as s, IndexService(index_files(written.root)) as ix:
        last = s.query_message(NEW_TOPIC, "key-2")[0]
        assert ix.indexed_end() == last.physical_offset
        assert ix.query_offset(NEW_TOPIC, "key-2", 64).phy_offsets == [last.physical_offset]
    code, out, err = run_cli("query-msg", "--store", str(written.root), "--topic", NEW_TOPIC, "--key", "key-1",
                             "--json")
    assert code == 0, err
    rows = json.loads(out)["messages"]
    assert [(r["topic"], r["keys"]) for r in rows] == [(NEW_TOPIC, "key-1")]
