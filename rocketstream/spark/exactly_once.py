"""The exactly-once streaming sink (``.option("exactlyOnce", "true")``): two-phase commit over RocketMQ's
transactional messages (4.9.8 ``TransactionalMessageServiceImpl`` / ``EndTransactionProcessor``).

Phase one, in the tasks (:func:`send_halves`): every row is sent as one half message (``TRAN_MSG=true``,
``PGROUP=<the query's transaction group>``, sysFlag TRANSACTION_PREPARED) - one per row because 4.9.8's
``CommitLog.putMessages`` refuses a batch holding transactional messages - pipelined
(:data:`HALVES_IN_FLIGHT` sends outstanding), never retried (a retry after a timeout could store a second
half with the same UNIQ_KEY that the task does not know of), each with the user property
:data:`MARK_PROPERTY` = ``<batchId>:<attempt>`` (the micro-batch, and a fresh id per task attempt). The task
returns where each half is (:class:`HalfMessages`: broker address, half queue offset, commit-log offset,
UNIQ_KEY).

Phase two, on the driver (:class:`Committer`): ``commit(messages, batchId)`` first writes the durable
record of the batch (:class:`CommitRecord`: the task attempts chosen, state ``committing``) and then ends
every half with END_TRANSACTION COMMIT, sent as a request (not oneway) so that each end is confirmed by the
broker's answer; once all are confirmed the record says ``ended``. ``abort`` ends the halves it is given
with ROLLBACK. A ``commit`` of a batch the record already holds (the driver died after recording it,
before Spark's commit log, and Spark runs the batch again) rolls its new halves back. No half is ever ended
twice by the driver: 4.9.8's END_TRANSACTION COMMIT does not look for the op record, so a second COMMIT
would store the message again.

Halves nobody ended (a task attempt that failed, a driver killed before or during the commit) are resolved
by the broker's check-back (CHECK_TRANSACTION_STATE), which only asks about halves still without an op
record. The broker asks *a* live producer channel of the half's ``PGROUP``: the tasks send with the
``producerGroup`` option's group, and the only member of the transaction group (:func:`transaction_group`:
one per checkpoint) is the :class:`Responder`, a process the driver starts for the query (it exits when the
driver's JVM does) that answers from the record (:func:`decide`).

On a secured cluster (the ``accessKey``/``secretKey``/``securityToken``, ``tls.*`` and ``namespace`` options,
:class:`~rocketstream.spark.secured.SecuredOptions`) the task senders, the committer and the responder all sign
their requests with the account and connect over TLS as the query's other clients do; in a namespace the
topics, the ``producerGroup`` and the transaction group are ``namespace%name`` on the wire (``PGROUP`` of
every half is the wrapped transaction group, the group the responder registers). The responder gets the
secured options on its standard input, never on its command line or in its environment.

Kill points for tests only: the environment variable :data:`KILL_ENV` = ``<step>[@<batchId>]`` (several
separated by commas) makes the
driver SIGKILL its JVM's process group at that step (``before_commit``, ``after_intent``, ``mid_end``,
``after_end``), or a task's Python worker kill itself after sending half of its rows (``task``, first
attempt only). Unset, nothing happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import pickle
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import WriterCommitMessage

from rocketstream.client.transaction import (
    HalfRef,
    LocalTransactionState,
    TransactionListener,
    end_transactions,
    send_half_messages,
)
from rocketstream.codec import PROPERTY_UNIQ_KEY
from rocketstream.errors import MQClientError, OptionError, RocketStreamError
from rocketstream.spark.secured import NOT_SECURED, SecuredOptions

log = logging.getLogger("rocketstream.spark")

MARK_PROPERTY = "rocketstreamTx"   # <batchId>:<task attempt id>, on every half message the sink sends
KILL_ENV = "ROCKETSTREAM_SINK_KILL_AT"   # tests only, see the module doc
KILL_STEPS = ("before_commit", "after_intent", "mid_end", "after_end", "task")
STATE_DIR = "rocketmq-sink"   # under the query's checkpoint location
BATCH_ID_PROPERTY = "streaming.sql.batchId"   # MicroBatchExecution.BATCH_ID_KEY, a Spark local property
HALVES_IN_FLIGHT = 64
ENDS_IN_FLIGHT = 64
END_CHUNK = 1024   # COMMITs confirmed and recorded (CommitRecord.add_ended) before the next ones are sent
COMMITTING, ENDED, UNRESOLVED = "committing", "ended", "unresolved"
# ended batch records kept behind the newest, as Spark keeps its own offset and commit logs
# (spark.sql.streaming.minBatchesToRetain's default); older ones answer nothing the record's max does not
RETAIN_BATCHES = 100


def transaction_group(checkpoint: str) -> str:
    """The query's transaction producer group: one per checkpoint directory (its real path hashed), so that
    only this query's responder is asked about its halves."""
    digest = hashlib.sha1(os.path.realpath(checkpoint).encode()).hexdigest()[:16]
    return f"rocketstream-eos-{digest}"


# ---------------------------------------------------------------------------------------- the record

def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CommitRecord:
    """Which micro-batches are committed, and by which task attempts: one small JSON file per batch under
    ``<checkpointLocation>/rocketmq-sink/batches/``, written to a temporary file, fsynced and renamed (the
    same way Spark writes its own offset and commit logs into the checkpoint), so that it lives exactly as
    long as the query's checkpoint and is read by whichever driver restarts it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.batches = root / "batches"

    def ensure(self) -> None:
        self.batches.mkdir(parents=True, exist_ok=True)

    def load(self, batch_id: int) -> dict[str, Any] | None:
        path = self.batches / str(batch_id)
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        try:
            entry = json.loads(text)
            if not isinstance(entry, dict) or entry.get("batch") != batch_id or \
                    entry.get("state") not in (COMMITTING, ENDED, UNRESOLVED) or \
                    not isinstance(entry.get("attempts"), list):
                raise ValueError("not a batch record")
        except ValueError as exc:
            raise RocketStreamError(f"exactly-once sink: batch record {path} is unreadable: {exc}") from exc
        return entry

    def add_ended(self, batch_id: int, msg_ids: Iterable[str]) -> None:
        """Append the UNIQ_KEYs of halves whose COMMIT the broker confirmed to ``batches/<batchId>.ended``
        (fsynced before the next chunk of ends is sent)."""
        self.ensure()
        fd = os.open(self.batches / f"{batch_id}.ended", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, "".join(f"{m}\n" for m in msg_ids).encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def ended(self, batch_id: int) -> set[str]:
        """The UNIQ_KEYs :meth:`add_ended` recorded for the batch (a torn last line is not one)."""
        try:
            text = (self.batches / f"{batch_id}.ended").read_text()
        except FileNotFoundError:
            return set()
        lines = text.split("\n")
        return set(lines[:-1])   # every complete line ends with a newline

    def max_batch(self) -> int:
        """The highest batch id recorded, -1 for none."""
        if not self.batches.is_dir():
            return -1
        ids = [int(p.name) for p in self.batches.iterdir() if p.name.isdigit()]
        return max(ids, default=-1)

    def prune(self, newest: int, retain: int = RETAIN_BATCHES) -> int:
        """After batch ``newest`` ended: delete the ``.ended`` lists of ended batches before it (:func:`decide`
        reads a list only while its batch is not ended) and the records of ended batches more than ``retain``
        before it (a missing record at or below the newest is answered ROLLBACK, as an ended one is; Spark
        re-runs only its newest batch). Unresolved and committing records stay. Returns the files deleted."""
        if not self.batches.is_dir():
            return 0
        gone = 0
        for batch_id in sorted(int(p.name) for p in self.batches.iterdir() if p.name.isdigit()):
            if batch_id >= newest:
                break
            entry = self.load(batch_id)
            if entry is None or entry["state"] != ENDED:
                continue
            doomed = [self.batches / f"{batch_id}.ended"]
            if batch_id < newest - retain:
                doomed.append(self.batches / str(batch_id))   # the record last: its list never outlives it
            for path in doomed:
                try:
                    path.unlink()
                    gone += 1
                except FileNotFoundError:
                    pass
        if gone:
            _fsync_dir(self.batches)
        return gone

    def write(self, batch_id: int, attempts: Iterable[str], state: str, owner: str) -> None:
        self.ensure()
        entry = {"batch": batch_id, "attempts": sorted(attempts), "state": state, "owner": owner,
                 "time": int(time.time() * 1000)}
        tmp = self.batches / f".{batch_id}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "w") as f:
            f.write(json.dumps(entry))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.batches / str(batch_id))
        _fsync_dir(self.batches)


# ---------------------------------------------------------------------------------------- processes

def _proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(comm, ppid, starttime) of ``pid`` from /proc, None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    comm = raw[raw.index("(") + 1:raw.rindex(")")]
    rest = raw[raw.rindex(")") + 2:].split()
    return comm, int(rest[1]), int(rest[19])


def driver_jvm() -> str:
    """``<pid>:<starttime>`` of the Spark driver's JVM: the nearest ``java`` ancestor of this process (the
    Python workers that plan and commit a write are its descendants); the parent when there is none."""
    pid = os.getpid()
    while pid > 1:
        stat = _proc_stat(pid)
        if stat is None:
            break
        if stat[0] == "java":
            return f"{pid}:{stat[2]}"
        pid = stat[1]
    parent = os.getppid()
    stat = _proc_stat(parent)
    return f"{parent}:{stat[2] if stat else 0}"


def alive(owner: str) -> bool:
    pid_text, _, start = owner.partition(":")
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    stat = _proc_stat(pid)
    return stat is not None and str(stat[2]) == start


def kill_wanted(step: str, batch_id: int | None) -> bool:
    """Whether :data:`KILL_ENV` (``<step>[@<batchId>]``, several separated by commas) names ``step`` now."""
    for item in os.environ.get(KILL_ENV, "").split(","):
        want, _, at = item.strip().partition("@")
        if want == step and (not at or batch_id is None or int(at) == batch_id):
            return True
    return False


def kill_point(step: str, batch_id: int | None) -> None:
    """Tests only (:data:`KILL_ENV`): SIGKILL the driver - its JVM's process group - at ``step``."""
    if not kill_wanted(step, batch_id):
        return
    spec = os.environ.get(KILL_ENV)
    if step == "task":
        log.warning("exactly-once sink: %s=%s: killing this task's worker", KILL_ENV, spec)
        os.kill(os.getpid(), signal.SIGKILL)
    jvm = int(driver_jvm().partition(":")[0])
    log.warning("exactly-once sink: %s=%s: killing the driver (JVM %d and its process group)", KILL_ENV, spec, jvm)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(os.getpgid(jvm), signal.SIGKILL)
    os.kill(jvm, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


# ---------------------------------------------------------------------------------------- tasks

@dataclass
class HalfMessages(WriterCommitMessage):
    """What one task attempt reports: its attempt id, its batch, and where each of its half messages is
    (:class:`~rocketstream.client.transaction.HalfRef`)."""

    attempt: str
    batch_id: int
    halves: list[HalfRef] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return len(self.halves)


def task_batch_id() -> int:
    """The micro-batch a task belongs to: Spark's local property ``streaming.sql.batchId``."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    raw = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
    if raw is None:
        raise RocketStreamError(f"exactly-once sink: the task has no Spark local property {BATCH_ID_PROPERTY} "
                                "(not a streaming micro-batch?)")
    return int(raw)


def task_attempt_number() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.attemptNumber() if ctx is not None else 0


class HalfSender:
    """A task's sender of half messages: a plain Producer of the ``producerGroup`` option's group (never the
    transaction group, so the broker never asks a task's short-lived client about a transaction), sends
    never retried (a retry after a timeout could store a second half with the same UNIQ_KEY that the task
    does not know of: its attempt would be committed twice)."""

    def __init__(self, name_server: str, producer_group: str, tx_group: str, send_timeout_ms: int,
                 max_message_size: int, batch_id: int, secured: SecuredOptions = NOT_SECURED) -> None:
        from rocketstream.client import Producer

        self.tx_group = secured.wrap(tx_group)   # PGROUP: the group the responder registers on the wire
        self.out = HalfMessages(uuid.uuid4().hex, batch_id)
        self.mark = f"{batch_id}:{self.out.attempt}"
        self.producer = Producer(secured.wrap(producer_group), namesrv=name_server,
                                 instance_name=f"spark-sink-eos-{self.out.attempt[:12]}",
                                 credentials=secured.credentials, tls=secured.tls,
                                 send_msg_timeout=send_timeout_ms / 1000, retry_times_when_send_failed=0,
                                 max_message_size=max_message_size).start()
        self.sent = 0

    def send(self, msgs: list[Any], queue: Any | None) -> None:
        """Send ``msgs`` (client Messages, marked here) as half messages, :data:`HALVES_IN_FLIGHT` at a time."""
        from rocketstream.client.common import SendStatus

        for m in msgs:
            m.properties[MARK_PROPERTY] = self.mark
        results = send_half_messages(self.producer, msgs, transaction_group=self.tx_group, queue=queue,
                                     in_flight=HALVES_IN_FLIGHT)
        inst = self.producer.instance
        for r in results:
            if r.status is not SendStatus.SEND_OK:
                raise MQClientError(f"half message {r.msg_id} to {r.queue} stored with status {r.status.name}: "
                                    "the task fails (its halves are rolled back)")
            addr = inst.broker_addr(r.queue.broker_name)
            if addr is None:
                raise MQClientError(f"no address of broker {r.queue.broker_name} that stored half {r.msg_id}")
            self.out.halves.append(HalfRef.of(addr, r))
        self.sent += len(msgs)

    def close(self) -> None:
        self.producer.shutdown()


# ---------------------------------------------------------------------------------------- driver

class Committer:
    """The driver's side of a micro-batch: record, then end every half once (see the module doc)."""

    def __init__(self, record: CommitRecord, name_server: str, tx_group: str, timeout_s: float,
                 secured: SecuredOptions = NOT_SECURED) -> None:
        self.record = record
        self.name_server = name_server
        self.tx_group = secured.wrap(tx_group)   # END_TRANSACTION's producerGroup, as the halves' PGROUP
        self.timeout = timeout_s
        self.secured = secured

    def commit(self, messages: Sequence[Any], batch_id: int) -> int:
        """Returns the number of rows committed (0 for a batch the record already holds)."""
        tasks = [m for m in messages if isinstance(m, HalfMessages)]
        kill_point("before_commit", batch_id)
        if self.record.load(batch_id) is not None:
            n = sum(len(t.halves) for t in tasks)
            self._end(tasks, LocalTransactionState.ROLLBACK_MESSAGE, batch_id)
            log.warning("exactly-once sink: micro-batch %d was committed before (by an earlier run of the query): "
                        "its %d new half message(s) are rolled back", batch_id, n)
            return 0
        owner = driver_jvm()
        attempts = {t.attempt for t in tasks}
        self.record.write(batch_id, attempts, COMMITTING, owner)
        kill_point("after_intent", batch_id)
        try:
            failed = self._end(tasks, LocalTransactionState.COMMIT_MESSAGE, batch_id, kill_midway=True)
        except BaseException:
            # this driver stops ending the batch: the check-back commits what it left undecided
            self.record.write(batch_id, attempts, UNRESOLVED, owner)
            raise
        if failed:
            self.record.write(batch_id, attempts, UNRESOLVED, owner)
            raise MQClientError(f"exactly-once sink: micro-batch {batch_id}: {failed} END_TRANSACTION commit(s) "
                                "were not confirmed by the broker; the broker's check-back commits those it did "
                                "not apply")
        self.record.write(batch_id, attempts, ENDED, owner)
        kill_point("after_end", batch_id)
        self.record.prune(batch_id)
        return sum(len(t.halves) for t in tasks)

    def abort(self, messages: Sequence[Any], batch_id: int) -> None:
        tasks = [m for m in messages if isinstance(m, HalfMessages)]
        failed = self._end(tasks, LocalTransactionState.ROLLBACK_MESSAGE, batch_id)
        if failed:
            log.warning("exactly-once sink: micro-batch %d aborted; %d rollback(s) not confirmed (the broker's "
                        "check-back rolls them back)", batch_id, failed)

    def _end(self, tasks: Sequence[HalfMessages], state: LocalTransactionState, batch_id: int, *,
             kill_midway: bool = False) -> int:
        """END_TRANSACTION for every half, each once; the number not confirmed (each logged)."""
        from rocketstream.client.api import MQClientAPI

        halves = [h for t in tasks for h in t.halves]
        if not halves:
            return 0
        midway = kill_midway and kill_wanted("mid_end", batch_id)
        parts = [halves[:len(halves) // 2], halves[len(halves) // 2:]] if midway else [halves]
        committing = state is LocalTransactionState.COMMIT_MESSAGE
        if committing:   # chunks of END_CHUNK, each recorded once confirmed
            parts = [p[i:i + END_CHUNK] for p in parts for i in range(0, len(p), END_CHUNK)]
        cut = len(halves) // 2 if midway else -1

        async def run() -> list[tuple[HalfRef, str | None]]:
            api = MQClientAPI(self.name_server, credentials=self.secured.credentials, tls=self.secured.tls)
            out: list[tuple[HalfRef, str | None]] = []
            try:
                done = 0
                for part in parts:
                    if done == cut:
                        kill_point("mid_end", batch_id)
                    answers = await end_transactions(api, self.tx_group, part, state, timeout=self.timeout,
                                                     in_flight=ENDS_IN_FLIGHT)
                    if committing:
                        self.record.add_ended(batch_id, [h.msg_id for h, why in zip(part, answers, strict=True)
                                                         if why is None])
                    out += zip(part, answers, strict=True)
                    done += len(part)
            finally:
                await api.close()
            return out
        failed = 0
        for h, why in asyncio.run(run()):
            if why is not None:
                failed += 1
                log.warning("exactly-once sink: batch %d: END_TRANSACTION %s of %s at %s not confirmed: %s",
                            batch_id, state.name, h.msg_id, h.addr, why)
        return failed


# ---------------------------------------------------------------------------------------- check-back

def decide(record: CommitRecord, mark: str | None, msg_id: str | None = None) -> LocalTransactionState:
    """The answer to the broker's check of a half marked ``<batchId>:<attempt>`` with UNIQ_KEY ``msg_id``,
    from the record alone. Every check is about a copy: 4.9.8's check service re-puts the half
    (``putBackHalfMsgQueue``) before it asks, and a COMMIT the driver sent for the original still commits the
    original - so a half whose COMMIT the driver had confirmed may still be asked about, and must be rolled
    back then.

    * batch recorded, attempt chosen, state ``committing`` by a driver still alive: UNKNOW (that driver is
      ending it now: answering COMMIT too could end it twice);
    * batch recorded, attempt chosen, ``committing`` by a dead driver or ``unresolved``: ROLLBACK if the
      driver recorded its COMMIT as confirmed (``<batchId>.ended``), else COMMIT;
    * batch recorded and ``ended`` (every chosen half confirmed ended: anything still asked about is a
      copy the check service made meanwhile), or the attempt not chosen: ROLLBACK;
    * batch not recorded and above every recorded batch: UNKNOW (its tasks may still run; a run that died
      is run again under the same batch id, with new attempts);
    * batch not recorded below a recorded one: ROLLBACK (aborted, or a dead run's attempt).
    A half without the mark is not the sink's: UNKNOW."""
    if not mark or ":" not in mark:
        return LocalTransactionState.UNKNOW
    batch_text, _, attempt = mark.partition(":")
    try:
        batch_id = int(batch_text)
    except ValueError:
        return LocalTransactionState.UNKNOW
    entry = record.load(batch_id)
    if entry is None:
        return LocalTransactionState.UNKNOW if batch_id > record.max_batch() else \
            LocalTransactionState.ROLLBACK_MESSAGE
    if attempt not in entry["attempts"] or entry["state"] == ENDED:
        return LocalTransactionState.ROLLBACK_MESSAGE
    if entry["state"] == COMMITTING and alive(str(entry.get("owner", ""))):
        return LocalTransactionState.UNKNOW
    if msg_id is not None and msg_id in record.ended(batch_id):
        return LocalTransactionState.ROLLBACK_MESSAGE
    return LocalTransactionState.COMMIT_MESSAGE


class RecordListener(TransactionListener):
    """The responder's listener: check-backs answered by :func:`decide`."""

    def __init__(self, record: CommitRecord) -> None:
        self.record = record
        self.answers: dict[str, int] = {}

    def execute_local_transaction(self, msg: Any, arg: Any) -> LocalTransactionState:
        raise RocketStreamError("the exactly-once sink's responder sends no transactional message")

    def check_local_transaction(self, msg: Any) -> LocalTransactionState:
        state = decide(self.record, msg.get_property(MARK_PROPERTY), msg.get_property(PROPERTY_UNIQ_KEY))
        self.answers[state.name] = self.answers.get(state.name, 0) + 1
        log.info("exactly-once sink: check of %s (%s): %s", msg.msg_id, msg.get_property(MARK_PROPERTY), state.name)
        return state


class Responder:
    """Starts (once per driver JVM) the process that answers the broker's check-backs for a query."""

    @staticmethod
    def ensure(root: Path, tx_group: str, name_server: str, secured: SecuredOptions = NOT_SECURED) -> None:
        root.mkdir(parents=True, exist_ok=True)
        jvm = driver_jvm()
        pidfile = root / f"responder-{jvm.replace(':', '-')}.pid"
        try:
            pid = int(pidfile.read_text().strip())
            if _proc_stat(pid) is not None:
                return
        except (FileNotFoundError, ValueError):
            pass
        logfile = open(root / "responder.log", "ab")   # noqa: SIM115 - handed to the child
        try:
            # the secured options (secrets) go through a pipe: a command line is visible to every user
            proc = subprocess.Popen([sys.executable, "-m", "rocketstream.spark.exactly_once", str(root), tx_group,
                                     name_server, jvm], stdin=subprocess.PIPE, stdout=logfile, stderr=logfile,
                                    start_new_session=True, env=dict(os.environ))
        finally:
            logfile.close()
        assert proc.stdin is not None
        with proc.stdin:
            proc.stdin.write(pickle.dumps(secured))
        pidfile.write_text(str(proc.pid))


def serve(root: Path, tx_group: str, name_server: str, jvm: str, secured: SecuredOptions = NOT_SECURED) -> int:
    """The responder's body: one per JVM (``responder-<jvm>.lock``), one per query at a time (``responder.lock``,
    waited for: the responder of a driver that died exits within a second), a TransactionProducer of the
    transaction group whose listener is :class:`RecordListener`, until the JVM is gone."""
    from rocketstream.client import TransactionProducer

    root.mkdir(parents=True, exist_ok=True)
    mine = open(root / f"responder-{jvm.replace(':', '-')}.lock", "a")   # noqa: SIM115
    try:
        fcntl.flock(mine, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0   # a sibling serves this JVM
    query = open(root / "responder.lock", "a")   # noqa: SIM115
    while True:
        if not alive(jvm):
            return 0
        try:
            fcntl.flock(query, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            time.sleep(0.2)
    record = CommitRecord(root)
    producer = TransactionProducer(secured.wrap(tx_group), namesrv=name_server,
                                   transaction_listener=RecordListener(record),
                                   instance_name=f"spark-sink-responder-{os.getpid()}",
                                   credentials=secured.credentials,
                                   tls=secured.tls).start()
    log.warning("exactly-once sink: responder of %s for JVM %s started (pid %d)", tx_group, jvm, os.getpid())
    try:
        while alive(jvm):
            time.sleep(0.5)
    finally:
        producer.shutdown()
        log.warning("exactly-once sink: responder of %s: JVM %s gone, stopped", tx_group, jvm)
    return 0


def check_kill_env() -> None:
    spec = os.environ.get(KILL_ENV)
    for item in (spec or "").split(","):
        step, _, at = item.strip().partition("@")
        if spec and (step not in KILL_STEPS or (at and not at.isdigit())):
            raise OptionError(KILL_ENV, f"must be one of {', '.join(KILL_STEPS)}, optionally @<batchId>, "
                                        "several separated by commas", spec)


if __name__ == "__main__":   # the responder process (Responder.ensure starts it)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    given = pickle.loads(sys.stdin.buffer.read())   # Responder.ensure's own pipe: the query's SecuredOptions
    if not isinstance(given, SecuredOptions):
        raise RocketStreamError(f"exactly-once responder: standard input holds {type(given).__name__}, "
                                "not the query's SecuredOptions")
    sys.exit(serve(Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], given))
