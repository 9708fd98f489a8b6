"""A writer process appends while this process reads through a read-only store: every message is
seen once, in order, complete (CRC checked), never a partial record."""

import subprocess
import sys
import time
import zlib

from rocketstream.store import GetMessageStatus as S
from rocketstream.store import MessageStore
from storeutil import open_small

N_PER_QUEUE = 300
QUEUES = 3

WRITER = r"""
import sys, time
sys.path.insert(0, sys.argv[2])
from storeutil import open_small
from rocketstream.store import Message
from pathlib import Path
st = open_small(Path(sys.argv[1]))
seq = [0] * %(queues)d
i = 0
while min(seq) < %(n)d:
    q = i %% %(queues)d
    i += 1
    if seq[q] >= %(n)d:
        continue
    if i %% 7 == 0:
        k = min(5, %(n)d - seq[q])
        r = st.put_messages([Message("C", b"q%%d-%%d|" %% (q, seq[q] + j) + b"z" * (37 * j)) for j in range(k)], q)
        seq[q] += k
    else:
        r = st.put_message(Message("C", b"q%%d-%%d|" %% (q, seq[q]) + b"y" * (i %% 300), tags="t"), q)
        seq[q] += 1
    assert r.ok, r
    if i %% 50 == 0:
        time.sleep(0.002)
st.close()
"""


def test_reader_process_never_sees_partial_records(tmp_path):
    root = tmp_path / "s"
    open_small(root).close()
    code = WRITER % {"queues": QUEUES, "n": N_PER_QUEUE}
    writer = subprocess.Popen([sys.executable, "-c", code, str(root), str(__import__("pathlib").Path(__file__).parent)],
                              stderr=subprocess.PIPE)
    seen = [0] * QUEUES
    last_max = 0
    deadline = time.time() + 120
    with MessageStore.open(root, read_only=True) as ro:
        while min(seen) < N_PER_QUEUE and time.time() < deadline:
            progressed = False
            for q in range(QUEUES):
                r = ro.get_message("g", "C", q, seen[q], 32)
                if r.status is not S.FOUND:
                    assert r.status in (
                        S.OFFSET_OVERFLOW_ONE, S.NO_MATCHED_LOGIC_QUEUE, S.NO_MESSAGE_IN_QUEUE), r.status
                    continue
                units = ro.read_cq_units("C", q, seen[q], seen[q] + len(r.messages))   # validated
                assert units["offset"].tolist() == [m.physical_offset for m in r.messages]
                for m in r.messages:
                    assert m.queue_offset == seen[q]
                    assert m.body.startswith(b"q%d-%d|" % (q, seen[q]))
                    assert zlib.crc32(m.body) & 0x7FFFFFFF == m.body_crc
                    seen[q] += 1
                progressed = True
            cl_max = ro.commit_log_max_offset()
            assert cl_max >= last_max
            last_max = cl_max
            if not progressed:
                time.sleep(0.001)
        assert writer.wait(timeout=120) == 0, writer.stderr.read().decode()
    assert seen == [N_PER_QUEUE] * QUEUES
    with MessageStore.open(root, read_only=True) as ro:
        assert ro.check().ok
