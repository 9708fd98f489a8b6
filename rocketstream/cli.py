"""`rocketstream` — mqadmin-style commands over a store root or, with ``--namesrv``, through a cluster's
brokers; ``consume`` as a member of a consumer group; ``demo``; and the servers: ``namesrv``, ``broker``
and ``serve`` (both in one process; rocketstream/serve.py runs them).

Every command takes ``--store PATH`` (default: ``storePathRootDir`` of conf/broker.conf) and ``--json``
for machine-readable output. Inspection commands open the store read-only, so they are safe to run
against a live writer or a copy of a production broker's store. Errors from the package become one
clean line on stderr and exit status 2; ``check`` exits 1 when it finds problems.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rocketstream.errors import OptionError, RocketStreamError

EXAMPLES = {
    "produce": "rocketstream produce --topic TopicTest --count 10000 --body-size 256 --tags TagA,TagB --queues 4\n"
               "  rocketstream produce --namesrv 127.0.0.1:9876 --topic TopicTest --count 1000 --keys order-1,order-2",
    "topic-list": "rocketstream topic-list --json",
    "topic-status": "rocketstream topic-status --topic TopicTest",
    "consumer-progress": "rocketstream consumer-progress --group demo-group --topic TopicTest\n"
    "  rocketstream consumer-progress --namesrv 127.0.0.1:9876 --group demo-group",
    "consume": "rocketstream consume --namesrv 127.0.0.1:9876 --group g1 --topic TopicTest --from first --json\n"
    "  rocketstream consume --namesrv 127.0.0.1:9876 --group g1 --topic TopicTest --expression 'TagA || TagB' "
    "--count 100 --idle-timeout 10",
    "query-msg": "rocketstream query-msg --topic TopicTest --queue-id 0 --offset 42 --json\n"
    "  rocketstream query-msg --msg-id 7F00000100002A9F0000000000000000\n"
    "  rocketstream query-msg --topic TopicTest --key ORDER-42 --max 16",
    "check": "rocketstream check --store /data/rocketmq/store",
    "delete-expired": "rocketstream delete-expired --reserved-hours 24",
    "demo": "rocketstream demo\n  rocketstream demo --namesrv 127.0.0.1:9876",
    "namesrv": "rocketstream namesrv --listen 127.0.0.1:9876\n"
    "  RMQ_NAMESRV_ADDR=127.0.0.1:9876 rocketmq-4.9.8/bin/broker   # a Java broker registers with it",
    "broker": "rocketstream broker --store ./storage --listen 127.0.0.1:10911 --namesrv 127.0.0.1:9876",
    "serve": "rocketstream serve   # name server 127.0.0.1:9876 + broker 127.0.0.1:10911 on ./storage\n"
    "  rocketmq-4.9.8/bin/smoke --namesrv 127.0.0.1:9876   # a Java client against it",
}

PRODUCE_BATCH = 256
REQUEST_TIMEOUT_S = 10.0   # a command's wait for one broker answer (heartbeat) before it gives up


# ---------------------------------------------------------------------------------------------
# helpers

# Environment variables of a secured cluster's account, so that secrets stay out of shell history
# (the --access-key / --secret-key / --security-token options win over them).
ENV_ACCESS_KEY = "ROCKETMQ_ACCESS_KEY"
ENV_TLS_KEY_PASSWORD = "ROCKETMQ_TLS_KEY_PASSWORD"   # the password of --tls-key (RocketMQ's tls.client.keyPassword)
ENV_SECRET_KEY = "ROCKETMQ_SECRET_KEY"
ENV_SECURITY_TOKEN = "ROCKETMQ_SECURITY_TOKEN"
SECURED_FLAGS = ("--access-key", "--secret-key", "--security-token", "--tls", "--tls-trust-cert", "--tls-cert",
                 "--tls-key", "--tls-key-password", "--tls-test-mode", "--namespace")


class Secured:
    """A command's way into a secured cluster: the client keywords (``credentials=``, ``tls=``) and the
    namespace its topics and groups are wrapped in (``NamespaceUtil``); repr shows no secret."""

    def __init__(self, credentials: Any, tls: Any, namespace: str | None) -> None:
        self.credentials, self.tls, self.namespace = credentials, tls, namespace

    def client_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"credentials": self.credentials}
        if self.tls is not None:
            kw["tls"] = self.tls
        return kw

    def wrap(self, resource: str) -> str:
        from rocketstream.client.namespace import wrap

        return wrap(self.namespace, resource)

    def unwrap(self, resource: str) -> str:
        from rocketstream.client.namespace import unwrap

        return unwrap(self.namespace, resource)

    def __repr__(self) -> str:
        return f"Secured(credentials={self.credentials!r}, tls={self.tls!r}, namespace={self.namespace!r})"


def _secured(args: argparse.Namespace, *, network: bool) -> Secured:
    """The account (options, else ROCKETMQ_ACCESS_KEY / ROCKETMQ_SECRET_KEY / ROCKETMQ_SECURITY_TOKEN), TLS
    and namespace of a command; an OptionError naming the option when one is wrong or used without a
    cluster. A secret's value is never part of an error."""
    import ssl

    from rocketstream.client.credentials import Credentials
    from rocketstream.client.namespace import check_namespace
    from rocketstream.client.tls import TlsConfig

    flags = {"--access-key": args.access_key, "--secret-key": args.secret_key,
             "--security-token": args.security_token, "--tls-trust-cert": args.tls_trust_cert,
             "--tls-cert": args.tls_cert, "--tls-key": args.tls_key, "--tls-key-password": args.tls_key_password,
             "--namespace": args.namespace,
             "--tls": args.tls or None, "--tls-test-mode": args.tls_test_mode or None}
    if not network:
        given = [f for f, v in flags.items() if v is not None]
        if given:
            raise OptionError(given[0], "only with --namesrv (a cluster); a store directory has no account or TLS")
        return Secured(None, None, None)
    ak = args.access_key if args.access_key is not None else os.environ.get(ENV_ACCESS_KEY)
    sk = args.secret_key if args.secret_key is not None else os.environ.get(ENV_SECRET_KEY)
    token = args.security_token if args.security_token is not None else os.environ.get(ENV_SECURITY_TOKEN)
    credentials = None
    if ak or sk or token:
        if not ak:
            raise OptionError("--access-key", f"is required with a secret key or token (or set {ENV_ACCESS_KEY})")
        if not sk:
            raise OptionError("--secret-key", f"is required with an access key (or set {ENV_SECRET_KEY})")
        credentials = Credentials(ak, sk, token or None)
    tls = None
    key_password = args.tls_key_password if args.tls_key_password is not None else \
        os.environ.get(ENV_TLS_KEY_PASSWORD)
    wants_tls = args.tls or args.tls_test_mode or any(
        v is not None for v in (args.tls_trust_cert, args.tls_cert, args.tls_key))
    if key_password is not None and args.tls_key is None:
        where = "the flag" if args.tls_key_password is not None else ENV_TLS_KEY_PASSWORD
        raise OptionError("--tls-key-password", f"is the password of --tls-key, which is not given (from {where})")
    if wants_tls:
        try:
            tls = TlsConfig(trust_cert_path=args.tls_trust_cert, cert_path=args.tls_cert, key_path=args.tls_key,
                            key_password=key_password, test_mode=bool(args.tls_test_mode))
        except OptionError as exc:   # name the command-line flag, not the keyword
            flag = {"trust_cert_path": "--tls-trust-cert", "cert_path": "--tls-cert",
                    "key_path": "--tls-key", "key_password": "--tls-key-password"}.get(
                str(getattr(exc, "option", "")), "--tls")
            raise OptionError(flag, str(exc).split(": ", 1)[-1]) from exc
        if tls.cert_path is not None:   # the key is read now: a wrong or missing password fails before any request
            try:
                tls.ssl_context()
            except ssl.SSLError as exc:
                if key_password is not None:
                    flag, why = "--tls-key-password", "with that password"
                else:
                    flag, why = "--tls-key", f"without a password (an encrypted key needs --tls-key-password or " \
                                             f"{ENV_TLS_KEY_PASSWORD})"
                raise OptionError(flag, f"the client key {args.tls_key} cannot be loaded {why}: "
                                        f"{exc.reason or exc}") from exc
    namespace = check_namespace(args.namespace, "--namespace")
    return Secured(credentials, tls, namespace)


def _add_secured_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("secured clusters (with --namesrv)")
    g.add_argument("--access-key", default=None,
                   help=f"ACL account's access key (default ${ENV_ACCESS_KEY}); requests are signed as RocketMQ's "
                        "AclClientRPCHook signs them")
    g.add_argument("--secret-key", default=None,
                   help=f"the account's secret key (default ${ENV_SECRET_KEY}: prefer it, a flag stays in shell "
                        "history)")
    g.add_argument("--security-token", default=None, help=f"STS token (default ${ENV_SECURITY_TOKEN})")
    g.add_argument("--tls", action="store_true", help="connect over TLS (system trust store, host name checked)")
    g.add_argument("--tls-trust-cert", default=None, help="PEM CA certificate(s) to trust (implies --tls)")
    g.add_argument("--tls-cert", default=None, help="PEM client certificate for mutual TLS (with --tls-key)")
    g.add_argument("--tls-key", default=None, help="PEM client key for mutual TLS (with --tls-cert)")
    g.add_argument("--tls-key-password", default=None,
                   help=f"password of an encrypted --tls-key (default ${ENV_TLS_KEY_PASSWORD}: prefer it, a flag stays "
                        "in shell history)")
    g.add_argument("--tls-test-mode", action="store_true",
                   help="TLS without checking the server's certificate (RocketMQ's tls.test.mode.enable)")
    g.add_argument("--namespace", default=None,
                   help="the cluster namespace: topics and groups are 'namespace%%name' on the wire")


def _open_store(args: argparse.Namespace, *, read_only: bool):
    from rocketstream.store import MessageStore
    from rocketstream.store.meta.config import writer_config

    if read_only:
        return MessageStore.open(args.store, read_only=True)
    return MessageStore.open(args.store, config=writer_config(args.store), create=True)


def _default_store() -> Path:
    from rocketstream.errors import StoreConfigError
    from rocketstream.store.meta.config import StoreConfig, default_broker_conf

    try:
        return Path(StoreConfig.from_broker_conf(default_broker_conf()).store_path_root_dir)
    except StoreConfigError as exc:
        raise OptionError("--store", f"no store given and no usable broker.conf ({exc})") from exc


def _emit(args: argparse.Namespace, payload: Any, render: Callable[[Any], str]) -> None:
    if args.json:
        print(json.dumps(payload, indent=2, sort_keys=False))
    else:
        print(render(payload))


def _table(rows: Sequence[dict], columns: Sequence[str]) -> str:
    if not rows:
        return "(none)"
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in columns}
    lines = ["  ".join(c.ljust(widths[c]) for c in columns)]
    lines += ["  ".join(str(r[c]).ljust(widths[c]) for c in columns) for r in rows]
    return "\n".join(lines)


def record_to_row(rec, broker_name: str) -> dict[str, Any]:
    """A decoded record as the row fields of DESIGN.md (timestamps epoch ms, body base64)."""
    return {
        "topic": rec.topic,
        "brokerName": broker_name,
        "queueId": rec.queue_id,
        "queueOffset": rec.queue_offset,
        "commitLogOffset": rec.physical_offset,
        "storeSize": rec.total_size,
        "msgId": rec.msg_id,
        "offsetMsgId": rec.offset_msg_id,
        "tags": rec.tags,
        "keys": rec.keys,
        "body": base64.b64encode(rec.uncompressed_body()).decode("ascii"),
        "properties": dict(rec.properties),
        "bornTimestamp": rec.born_timestamp,
        "bornHost": str(rec.born_host),
        "storeTimestamp": rec.store_timestamp,
        "storeHost": str(rec.store_host),
        "sysFlag": rec.sys_flag,
        "bodyCRC": rec.body_crc,
        "reconsumeTimes": rec.reconsume_times,
        "flag": rec.flag,
        "preparedTransactionOffset": rec.prepared_transaction_offset,
    }


# ---------------------------------------------------------------------------------------------
# commands


def cmd_produce(args: argparse.Namespace) -> int:
    if args.namesrv is not None:
        return cmd_produce_remote(args)
    _secured(args, network=False)
    for opt, value in (("--group", args.group), ("--keys", args.keys), ("--send-timeout", args.send_timeout)):
        if value is not None:
            raise OptionError(opt, "only with --namesrv (sending over the network)", value)
    if args.queues is None:
        args.queues = 4
    from tqdm import tqdm

    from rocketstream.store import Message

    if args.count < 0:
        raise OptionError("--count", "must be >= 0", args.count)
    if args.body_size < 0:
        raise OptionError("--body-size", "must be >= 0", args.body_size)
    if args.queues <= 0:
        raise OptionError("--queues", "must be >= 1", args.queues)
    tags = [t for t in (args.tags or "").split(",") if t] or [None]
    rng = random.Random(args.seed)
    produced = 0
    with _open_store(args, read_only=False) as store:
        store.create_topic(args.topic, args.queues)
        # RocketMQ producers compress single messages at or above compressMsgBodyOverHowmuch and never
        # compress batches: bodies that large are sent one by one so they are stored compressed.
        single = args.body_size >= store.config.compress_msg_body_over
        pending: dict[int, list] = {q: [] for q in range(args.queues)}

        def flush_queue(q: int) -> None:
            nonlocal produced
            batch = pending[q]
            if not batch:
                return
            if single:
                results = [store.put_message(Message(topic=args.topic, body=b, tags=t, keys=k), queue_id=q)
                           for b, t, k in batch]
            else:
                bodies, batch_tags, keys = (list(c) for c in zip(*batch, strict=True))
                results = [store.put_batch(args.topic, q, bodies, tags=batch_tags, keys=keys)]
            for result in results:
                if result.status.name != "PUT_OK":
                    raise RocketStreamError(f"put to {args.topic}/{q} failed: {result.status.name}")
            produced += len(batch)
            bar.update(len(batch))
            pending[q] = []

        with tqdm(total=args.count, unit="msg", disable=args.json or not sys.stderr.isatty()) as bar:
            for i in range(args.count):
                q = i % args.queues
                body = _body(i, args.body_size, rng)
                pending[q].append((body, tags[i % len(tags)], f"key-{i}"))
                if len(pending[q]) >= PRODUCE_BATCH:
                    flush_queue(q)
            for q in range(args.queues):
                flush_queue(q)
        store.flush()
    payload = {"topic": args.topic, "produced": produced, "queues": args.queues}
    _emit(args, payload, lambda p: f"produced {p['produced']} messages to {p['topic']} over {p['queues']} queues")
    return 0


def cmd_produce_remote(args: argparse.Namespace) -> int:
    """``produce --namesrv``: send with the client's Producer (sync sends, retries on another broker)."""
    from rocketstream.client.producer import Producer

    for opt, value in (("--queues", args.queues), ("--store", args.store if args.store_given else None)):
        if value is not None:
            raise OptionError(opt, "only for the local store (not with --namesrv)", value)
    if args.count < 0:
        raise OptionError("--count", "must be >= 0", args.count)
    if args.body_size <= 0:
        raise OptionError("--body-size", "must be >= 1 (RocketMQ refuses empty bodies)", args.body_size)
    tags = [t for t in (args.tags or "").split(",") if t] or [None]
    keys = [k for k in (args.keys or "").split(",") if k]
    rng = random.Random(args.seed)
    statuses: dict[str, int] = {}
    sent = 0
    t0 = time.monotonic()
    secured = _secured(args, network=True)
    producer = Producer(secured.wrap(args.group or "rocketstream_cli_producer"), namesrv=args.namesrv,
                        send_msg_timeout=args.send_timeout if args.send_timeout is not None else 3.0,
                        **secured.client_kwargs())
    topic = secured.wrap(args.topic)
    with producer:
        for i in range(args.count):
            r = producer.send(topic, _body(i, args.body_size, rng), tags=tags[i % len(tags)],
                              keys=keys[i % len(keys)] if keys else f"key-{i}")
            sent += 1
            statuses[r.status.name] = statuses.get(r.status.name, 0) + 1
            if args.json:
                print(json.dumps({"msgId": r.msg_id, "offsetMsgId": r.offset_msg_id, "status": r.status.name,
                                  "brokerName": r.queue.broker_name, "queueId": r.queue.queue_id,
                                  "queueOffset": r.queue_offset}))
    seconds = time.monotonic() - t0
    payload = {"topic": args.topic, "namesrv": args.namesrv, "sent": sent, "statuses": statuses,
               "seconds": round(seconds, 3), "msgs_per_s": round(sent / seconds, 1) if seconds > 0 else None}
    if args.json:
        print(json.dumps({"summary": payload}))
    else:
        print(f"sent {sent} messages to {args.topic} via {args.namesrv} in {seconds:.2f} s "
              f"({payload['msgs_per_s']} msgs/s); statuses: {statuses}")
    return 0


def _body(i: int, size: int, rng: random.Random) -> bytes:
    head = f"message-{i} ".encode()
    if size <= len(head):
        return head[:size]
    return head + rng.randbytes(size - len(head))


def cmd_topic_list(args: argparse.Namespace) -> int:
    with _open_store(args, read_only=True) as store:
        topics = store.topics()
    _emit(args, {"topics": topics}, lambda p: "\n".join(p["topics"]) or "(no topics)")
    return 0


def cmd_topic_status(args: argparse.Namespace) -> int:
    with _open_store(args, read_only=True) as store:
        queue_ids = store.queue_ids(args.topic)
        if not queue_ids:
            raise OptionError("--topic", "no such topic in the store", args.topic)
        rows = []
        for q in queue_ids:
            last = store.last_store_timestamp(args.topic, q)
            rows.append(
                {
                    "brokerName": store.broker_name,
                    "queueId": q,
                    "minOffset": store.min_offset(args.topic, q),
                    "maxOffset": store.max_offset(args.topic, q),
                    "lastUpdateTimestamp": last if last is not None else 0,
                }
            )
    _emit(
        args,
        {"topic": args.topic, "queues": rows},
        lambda p: _table(p["queues"], ["brokerName", "queueId", "minOffset", "maxOffset", "lastUpdateTimestamp"]),
    )
    return 0


def cmd_consumer_progress(args: argparse.Namespace) -> int:
    if args.namesrv is not None:
        return cmd_consumer_progress_remote(args)
    _secured(args, network=False)
    from rocketstream.store.meta.offsets import ConsumerOffsetManager

    with _open_store(args, read_only=True) as store:
        offsets = ConsumerOffsetManager(store.root, read_only=True)
        table = offsets.table()
        rows = []
        for key in sorted(table):
            parts = key.split("@")
            if len(parts) != 2 or parts[1] != args.group:
                continue
            topic = parts[0]
            if args.topic and topic != args.topic:
                continue
            for q, consumer_offset in sorted(table[key].items()):
                broker_offset = store.max_offset(topic, q) if q in store.queue_ids(topic) else 0
                rows.append(
                    {
                        "topic": topic,
                        "brokerName": store.broker_name,
                        "queueId": q,
                        "brokerOffset": broker_offset,
                        "consumerOffset": consumer_offset,
                        "diff": max(broker_offset - consumer_offset, 0),
                    }
                )
    if not rows:
        raise OptionError("--group", "the group has no committed offsets in this store", args.group)
    total = sum(r["diff"] for r in rows)
    _emit(
        args,
        {"group": args.group, "queues": rows, "diffTotal": total},
        lambda p: _table(p["queues"], ["topic", "brokerName", "queueId", "brokerOffset", "consumerOffset", "diff"])
        + f"\n\nDiff Total: {p['diffTotal']}",
    )
    return 0


def cmd_query_msg(args: argparse.Namespace) -> int:
    if args.key is not None:
        return _query_msg_by_key(args)
    for option, value in (("--max", args.max), ("--begin-ms", args.begin_ms), ("--end-ms", args.end_ms)):
        if value is not None:
            raise OptionError(option, "only applies to a query by --key")
    if not args.msg_id and (args.topic is None or args.queue_id is None or args.offset is None):
        raise OptionError("--msg-id", "give either --msg-id, all of --topic, --queue-id and --offset, "
                                      "or --topic and --key")
    with _open_store(args, read_only=True) as store:
        if args.msg_id:
            rec = store.message_by_msg_id(args.msg_id)
        else:
            result = store.get_message("rocketstream-cli", args.topic, args.queue_id, args.offset, 1)
            if not result.messages:
                raise OptionError(
                    "--offset",
                    f"no message at {args.topic}/{args.queue_id}/{args.offset} ({result.status.name}; "
                    f"queue holds offsets [{result.min_offset}, {result.max_offset}))",
                    args.offset,
                )
            rec = result.messages[0]
        row = record_to_row(rec, store.broker_name)
    _emit(args, row, _render_row)
    return 0


def _render_row(row: dict[str, Any]) -> str:
    return "\n".join(f"{k:26} {v}" for k, v in row.items())


def _query_msg_by_key(args: argparse.Namespace) -> int:
    """mqadmin queryMsgByKey over the store's index/ files (MessageStore.query_message)."""
    from rocketstream.store.files.index_file import MAX_MSGS_NUM_BATCH, MAX_TIMESTAMP

    if args.topic is None:
        raise OptionError("--topic", "--key needs the topic the key belongs to")
    for option, value in (("--msg-id", args.msg_id), ("--queue-id", args.queue_id), ("--offset", args.offset)):
        if value is not None:
            raise OptionError(option, "cannot be combined with --key")
    if not args.key:
        raise OptionError("--key", "must not be empty", args.key)
    max_num = MAX_MSGS_NUM_BATCH if args.max is None else args.max
    if max_num <= 0:
        raise OptionError("--max", "must be >= 1", args.max)
    begin = 0 if args.begin_ms is None else args.begin_ms
    end = MAX_TIMESTAMP if args.end_ms is None else args.end_ms
    if begin > end:
        raise OptionError("--begin-ms", f"must not be after --end-ms ({end})", begin)
    with _open_store(args, read_only=True) as store:
        records = store.query_message(args.topic, args.key, max_num=max_num, begin_ms=begin, end_ms=end)
        rows = [record_to_row(rec, store.broker_name) for rec in records]
    payload = {"topic": args.topic, "key": args.key, "messages": rows}
    _emit(args, payload, lambda p: "\n\n".join(_render_row(r) for r in p["messages"])
          or f"(no message of {p['topic']} with key {p['key']!r})")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    with _open_store(args, read_only=True) as store:
        report = store.check()
    payload = {
        "ok": report.ok,
        "records": report.records,
        "units": report.units,
        "problems": [{"file": p.path, "offset": p.offset, "problem": p.message} for p in report.problems],
        "notes": report.notes,
    }

    def render(p: dict) -> str:
        head = f"{p['records']} records and {p['units']} consume-queue units checked"
        notes = [f"note: {n}" for n in p["notes"]]
        if p["ok"]:
            return "\n".join([f"OK: {head}, CRCs and CommitLog/ConsumeQueue agreement verified"] + notes)
        lines = [f"PROBLEMS: {len(p['problems'])} found ({head})"]
        lines += [f"- {x['file']} @ {x['offset']}: {x['problem']}" for x in p["problems"]]
        return "\n".join(lines + notes)

    _emit(args, payload, render)
    return 0 if report.ok else 1


def cmd_delete_expired(args: argparse.Namespace) -> int:
    if args.reserved_hours is not None and args.reserved_hours < 0:
        raise OptionError("--reserved-hours", "must be >= 0", args.reserved_hours)
    with _open_store(args, read_only=False) as store:
        deleted = store.delete_expired_files(reserved_hours=args.reserved_hours)
        hours = store.config.reserved_hours if args.reserved_hours is None else args.reserved_hours
    payload = {"reservedHours": hours, "deleted": [str(p) for p in deleted]}
    _emit(args, payload, lambda p: f"deleted {len(p['deleted'])} files older than {p['reservedHours']} h"
          + "".join(f"\n  {x}" for x in p["deleted"]))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from rocketstream.demo import run_demo

    return run_demo(store=args.store, count=args.count, json_output=args.json, run_command=main,
                    namesrv=args.namesrv)


def cmd_namesrv(args: argparse.Namespace) -> int:
    from rocketstream.namesrv import NamesrvConfig
    from rocketstream.remoting.loop import run as run_loop
    from rocketstream.remoting.server import parse_listen
    from rocketstream.serve import run_until_signal

    host, port = parse_listen(args.listen, 9876)
    tls = None
    if args.conf is not None:   # a conf file's tls.server.* lines (broker.conf names) make the port TLS
        from rocketstream.broker import BrokerConfig

        tls = BrokerConfig.from_conf(args.conf).tls_server
    _logging()
    run_loop(run_until_signal(namesrv=NamesrvConfig(host=host, port=port, kv_config_path=args.kv_config,
                                                    tls=tls)))
    return 0


def _broker_config(args: argparse.Namespace):
    """broker.conf (--conf, $ROCKETSTREAM_CONF, ./conf/broker.conf, else the built-in defaults) with the
    command line's settings over it."""
    from rocketstream.broker import BrokerConfig
    from rocketstream.remoting.server import parse_listen
    from rocketstream.store.meta.config import default_broker_conf

    config = BrokerConfig.from_conf(default_broker_conf())
    listen = parse_listen(args.listen, config.listen_port) if args.listen else None
    return config.with_overrides(store=args.store, listen=listen, namesrv_addr=getattr(args, "namesrv", None),
                                 broker_name=getattr(args, "broker_name", None))


def _logging() -> None:
    import logging

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def cmd_broker(args: argparse.Namespace) -> int:
    from rocketstream.remoting.loop import run as run_loop
    from rocketstream.serve import run_until_signal

    config = _broker_config(args)
    _logging()
    run_loop(run_until_signal(broker=config))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """A name server and a broker in one process (rocketstream/serve.py composes them); the broker
    registers with that name server unless broker.conf's namesrvAddr names others."""
    from rocketstream.namesrv import NamesrvConfig
    from rocketstream.remoting.loop import run as run_loop
    from rocketstream.remoting.server import parse_listen
    from rocketstream.serve import run_until_signal

    config = _broker_config(args)
    host, port = parse_listen(args.namesrv_listen, 9876)
    _logging()
    run_loop(run_until_signal(namesrv=NamesrvConfig(host=host, port=port), broker=config))
    return 0


def _progress_payload(group: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"group": group, "queues": rows, "diffTotal": sum(r["diff"] for r in rows)}


def _render_progress(p: dict[str, Any]) -> str:
    return (_table(p["queues"], ["topic", "brokerName", "queueId", "brokerOffset", "consumerOffset", "diff"])
            + f"\n\nDiff Total: {p['diffTotal']}")


def cmd_consumer_progress_remote(args: argparse.Namespace) -> int:
    """``consumer-progress --namesrv``: GET_CONSUME_STATS (208) from every broker of the group's retry-topic
    route (``mqadmin consumerProgress -g``), the same table as the local command."""
    from rocketstream.client.admin import consumer_progress
    from rocketstream.client.instance import MQClientInstance

    if args.store_given:
        raise OptionError("--store", "only for the local store (not with --namesrv)", args.store)
    secured = _secured(args, network=True)
    inst = MQClientInstance.get(args.namesrv, f"rocketstream-cli-{os.getpid()}", **secured.client_kwargs())
    inst.start()
    try:
        progress = inst.run(consumer_progress(inst, secured.wrap(args.group),
                                              secured.wrap(args.topic) if args.topic else None), 30.0)
    finally:
        inst.shutdown(force=True)
    rows = [{"topic": secured.unwrap(r.queue.topic), "brokerName": r.queue.broker_name, "queueId": r.queue.queue_id,
             "brokerOffset": r.broker_offset, "consumerOffset": r.consumer_offset, "diff": r.diff}
            for r in progress]
    if not rows:
        raise OptionError("--group", "the brokers report no progress for this group", args.group)
    _emit(args, _progress_payload(args.group, rows), _render_progress)
    return 0


def message_to_row(msg: Any) -> dict[str, Any]:
    """A received MessageExt as the row fields of DESIGN.md (timestamps epoch ms, body base64)."""
    return {
        "topic": msg.topic, "brokerName": msg.broker_name, "queueId": msg.queue_id, "queueOffset": msg.queue_offset,
        "commitLogOffset": msg.commit_log_offset, "storeSize": msg.store_size, "msgId": msg.msg_id,
        "offsetMsgId": msg.offset_msg_id, "tags": msg.tags, "keys": msg.keys,
        "body": base64.b64encode(msg.body).decode("ascii"), "properties": dict(msg.properties),
        "bornTimestamp": msg.born_timestamp, "bornHost": str(msg.born_host), "storeTimestamp": msg.store_timestamp,
        "storeHost": str(msg.store_host), "sysFlag": msg.sys_flag, "bodyCRC": msg.body_crc,
        "reconsumeTimes": msg.reconsume_times, "flag": msg.flag,
        "preparedTransactionOffset": msg.prepared_transaction_offset,
    }


CONSUME_FROM = {"first": "CONSUME_FROM_FIRST_OFFSET", "last": "CONSUME_FROM_LAST_OFFSET",
                "timestamp": "CONSUME_FROM_TIMESTAMP"}


def cmd_consume(args: argparse.Namespace) -> int:
    """``consume``: a LitePullConsumer in the group (rebalance with the group's other members), printing
    messages as they arrive, committing what was printed (every 5 s and at the end)."""
    from rocketstream.client.lite_pull import LitePullConsumer

    if args.store_given:
        raise OptionError("--store", "not used by consume (it reads through a broker)", args.store)
    if args.count is not None and args.count <= 0:
        raise OptionError("--count", "must be >= 1", args.count)
    if args.idle_timeout is not None and args.idle_timeout <= 0:
        raise OptionError("--idle-timeout", "must be > 0 seconds", args.idle_timeout)
    if (args.timestamp is not None) != (args.from_ == "timestamp"):
        raise OptionError("--timestamp", "is required with --from timestamp and only valid with it", args.timestamp)
    ts: int | str | None = None
    if args.timestamp is not None:
        ts = int(args.timestamp) if args.timestamp.isdigit() and len(args.timestamp) != 14 else args.timestamp
    secured = _secured(args, network=True)
    consumer = LitePullConsumer(secured.wrap(args.group), namesrv=args.namesrv,
                                consume_from_where=CONSUME_FROM[args.from_], consume_timestamp=ts, pull_batch_size=32,
                                instance_name=f"rocketstream-consume-{os.getpid()}", **secured.client_kwargs())
    consumer.subscribe(secured.wrap(args.topic), args.expression, expression_type=args.expression_type)
    consumer.start()
    try:
        # the brokers must know the consumer: a refused heartbeat (a wrong secret, no permission on the group
        # or topic) is the broker's answer now, not an idle wait for messages that will never come
        assert consumer.instance is not None
        for outcome in consumer.instance.send_heartbeat_now(REQUEST_TIMEOUT_S).values():
            if isinstance(outcome, BaseException):
                raise outcome
    except BaseException:
        consumer.shutdown()
        raise
    printed = 0
    last = time.monotonic()
    try:
        while args.count is None or printed < args.count:
            wait = 1.0
            if args.idle_timeout is not None:
                wait = min(wait, max(args.idle_timeout - (time.monotonic() - last), 0.01))
            msgs = consumer.poll(wait)
            if not msgs:
                if args.idle_timeout is not None and time.monotonic() - last >= args.idle_timeout:
                    break
                continue
            last = time.monotonic()
            for msg in msgs:
                if args.count is not None and printed >= args.count:
                    break
                if args.json:
                    row = message_to_row(msg)
                    row["topic"] = secured.unwrap(row["topic"])
                    print(json.dumps(row), flush=True)
                else:
                    body = msg.body.decode("utf-8", "backslashreplace")
                    print(f"{msg.broker_name}:{msg.queue_id}@{msg.queue_offset} {msg.msg_id} tags={msg.tags} "
                          f"keys={msg.keys} {body}", flush=True)
                printed += 1
    except KeyboardInterrupt:
        pass
    finally:
        consumer.shutdown()
    if not args.json:
        print(f"consumed {printed} messages from {args.topic} as {args.group}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------------
# parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rocketstream",
        description="Inspect and write a RocketMQ-compatible broker store, produce to and consume from a "
                    "RocketMQ cluster, or run a name server and a broker.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  " + EXAMPLES["topic-status"],
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--store", type=Path, default=None,
                        help="store root (default: storePathRootDir of the broker.conf)")
    common.add_argument("--conf", type=Path, default=None,
                        help="broker.conf to use (default: $ROCKETSTREAM_CONF, else ./conf/broker.conf, "
                             "else the built-in defaults)")
    common.add_argument("--json", action="store_true", help="machine-readable JSON output")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name: str, func, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(
            name,
            parents=[common],
            help=help_text,
            description=help_text,
            epilog="example:\n  " + EXAMPLES[name],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(func=func)
        return p

    p = add("produce", cmd_produce, "Write messages (keys and UNIQ_KEY set per message) to a topic: into the "
            "store directly, or with --namesrv over the network through a broker (the client's Producer).")
    p.add_argument("--topic", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--body-size", type=int, default=256)
    p.add_argument("--tags", default=None, help="comma-separated tags, assigned round-robin")
    p.add_argument("--queues", type=int, default=None, help="local store only: number of queues of the topic "
                   "(default 4)")
    p.add_argument("--namesrv", default=None, help="send over the network: name server address(es) "
                   "'host:port;host:port'")
    p.add_argument("--group", default=None, help="with --namesrv: producer group (default rocketstream_cli_producer)")
    p.add_argument("--keys", default=None, help="with --namesrv: comma-separated keys assigned round-robin "
                   "(default key-<i>)")
    p.add_argument("--send-timeout", type=float, default=None, help="with --namesrv: seconds per send (default 3)")
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    _add_secured_flags(p)

    add("topic-list", cmd_topic_list, "List the topics in the store.")
    p = add("topic-status", cmd_topic_status,
            "Per queue: brokerName, queueId, minOffset, maxOffset, lastUpdateTimestamp.")
    p.add_argument("--topic", required=True)
    p = add("consumer-progress", cmd_consumer_progress,
            "Per queue of a consumer group: broker offset, consumer offset, diff.")
    p.add_argument("--group", required=True)
    p.add_argument("--topic", default=None)
    p.add_argument("--namesrv", default=None, help="ask the brokers (GET_CONSUME_STATS) through this name server "
                   "instead of reading the local store")
    _add_secured_flags(p)
    p = add("consume", cmd_consume, "Consume a topic through a broker as a member of a consumer group (a "
            "LitePullConsumer), printing messages as they arrive; offsets are committed to the broker.")
    p.add_argument("--namesrv", required=True, help="name server address(es), 'host:port;host:port'")
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--expression", default="*", help="tag expression ('*', 'TagA || TagB') or SQL92 text")
    p.add_argument("--expression-type", default="TAG", choices=["TAG", "SQL92"])
    p.add_argument("--from", dest="from_", choices=sorted(CONSUME_FROM), default="last",
                   help="where a group without committed offsets starts (RocketMQ consumeFromWhere; default last)")
    p.add_argument("--timestamp", default=None, help="with --from timestamp: epoch ms or yyyyMMddHHmmss")
    p.add_argument("--count", type=int, default=None, help="stop after this many messages")
    p.add_argument("--idle-timeout", type=float, default=None, help="stop after this many seconds without a message")
    _add_secured_flags(p)
    p = add("query-msg", cmd_query_msg, "Show one message by queue offset or by message id, or the messages of a "
            "topic with a key (KEYS, through the index/ files of a real broker's store; a commit-log scan otherwise).")
    p.add_argument("--topic")
    p.add_argument("--queue-id", type=int)
    p.add_argument("--offset", type=int)
    p.add_argument("--msg-id")
    p.add_argument("--key", help="a message key (one of the space-separated KEYS); needs --topic")
    p.add_argument("--max", type=int, default=None,
                   help="at most this many messages, the newest (default and broker cap: maxMsgsNumBatch 64)")
    p.add_argument("--begin-ms", type=int, default=None, help="only messages stored at or after (epoch ms)")
    p.add_argument("--end-ms", type=int, default=None, help="only messages stored at or before (epoch ms)")
    add("check", cmd_check, "Verify CRCs and CommitLog/ConsumeQueue agreement; exit 1 when they disagree.")
    p = add("delete-expired", cmd_delete_expired,
            "Delete commit-log files older than fileReservedTime (never the newest) and the consume-queue "
            "files they orphan; a writer also does this on open and whenever the commit log rolls. A store "
            "written by a real broker has no retention policy of its own: give --reserved-hours.")
    p.add_argument("--reserved-hours", type=float, default=None,
                   help="override fileReservedTime of conf/broker.conf for this run (required for a store "
                        "written by a real broker, unless conf/broker.conf configures that store)")
    p = add("demo", cmd_demo, "Produce a sample topic and aggregate it with a Spark streaming query (AvailableNow).")
    p.add_argument("--count", type=int, default=20000, help="messages to produce (default 20000)")
    p.add_argument("--namesrv", default=None, help="network mode: produce to and read from the running broker of "
                   "this name server ('host:port;host:port') instead of the store directory")
    p = add("namesrv", cmd_namesrv, "Run a RocketMQ name server (brokers register, clients get routes) until "
            "SIGTERM; --store is not used.")
    p.add_argument("--listen", default="127.0.0.1:9876", help="HOST:PORT to bind (default 127.0.0.1:9876)")
    p.add_argument("--kv-config", type=Path, default=None, help="persist KV config here (default: in memory)")
    p = add("broker", cmd_broker, "Run a RocketMQ broker over the store (Java clients and mqadmin work against it) "
            "until SIGTERM; it registers with the name servers of --namesrv (or namesrvAddr of broker.conf).")
    p.add_argument("--listen", default=None,
                   help="HOST:PORT to bind and advertise (default brokerIP1:listenPort of broker.conf, "
                        "127.0.0.1:10911)")
    p.add_argument("--namesrv", default=None, help="name server address(es), 'host:port;host:port'")
    p.add_argument("--broker-name", default=None, help="brokerName (default: broker.conf's, broker-a)")
    p = add("serve", cmd_serve, "Run a name server and a broker over the store in one process until SIGTERM "
            "(default: the embedded store ./storage, 127.0.0.1:9876 and 127.0.0.1:10911).")
    p.add_argument("--listen", default=None,
                   help="broker HOST:PORT (default brokerIP1:listenPort of broker.conf, 127.0.0.1:10911)")
    p.add_argument("--namesrv-listen", default="127.0.0.1:9876", help="name server HOST:PORT (default 127.0.0.1:9876)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.conf is not None:   # like the broker's -c: everything below (and the demo's Spark) sees it
            from rocketstream.store.meta.config import CONF_ENV

            os.environ[CONF_ENV] = str(args.conf.resolve())
        args.store_given = args.store is not None
        if args.store is None and getattr(args, "namesrv", None) is None:
            args.store = _default_store()
        return args.func(args)
    except RocketStreamError as exc:
        print(f"rocketstream {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"rocketstream {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
