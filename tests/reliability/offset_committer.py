"""Child process of the offset-persist campaign: commits consumer offsets until it is killed.

usage: offset_committer.py STORE_ROOT ACK_FILE

Commit ``i`` sets every queue of group ``g`` (8 queues) to ``i`` and, every third commit, also every
queue of group ``h`` (through ``commit_many``) — so a torn or mixed table is visible as unequal
values. After each commit returns, ``"<i>"`` is appended to ACK_FILE with one write(2).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rocketstream.store.meta.offsets import ConsumerOffsetManager


def main() -> None:
    manager = ConsumerOffsetManager(Path(sys.argv[1]))
    ack = os.open(sys.argv[2], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    table = manager.table().get("T@g", {})
    i = max(table.values(), default=0)
    print("ready", flush=True)
    while True:
        i += 1
        if i % 3 == 0:
            manager.commit_many({("g", "T"): {q: i for q in range(8)}, ("h", "T"): {q: i for q in range(4)}})
        else:
            manager.commit("g", "T", {q: i for q in range(8)})
        os.write(ack, b"%d\n" % i)


if __name__ == "__main__":
    main()
