"""README's producer + push-consumer example, run as written against each broker (only the
name-server address swapped for the test broker's): the message it sends is the one its consumer gets."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LISTENER = "lambda msgs, ctx: print([m.body for m in msgs])"


def _example() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("### Python client"):]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "README's Python client section has no python example"
    return match.group(1)


def test_readme_client_example_sends_and_consumes(mq_broker, tmp_path: Path) -> None:
    code = _example()
    assert LISTENER in code and "127.0.0.1:9876" in code
    # the listener also records what it printed, so the script can wait for it and stop
    code = code.replace("127.0.0.1:9876", mq_broker.namesrv_addr).replace(
        LISTENER, "lambda msgs, ctx: seen.extend(m.body for m in msgs) or print([m.body for m in msgs])")
    script = tmp_path / "example.py"
    script.write_text("seen = []\n" + code + textwrap.dedent("""
        import time
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not seen:
            time.sleep(0.1)
        consumer.shutdown()
        assert seen == [b"hello"], seen
    """))
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert "SEND_OK" in lines[0], lines
    assert "[b'hello']" in lines, lines
