"""``remoting/codes.py`` against the real thing: every RequestCode / ResponseCode name and value of RocketMQ
4.9.8, read from its jars with ``javap -constants`` (skipped without a JDK or the distribution)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from rocketstream.remoting.codes import RequestCode, ResponseCode
from tests.realbroker import peers

# names ours has that 4.9.8 has not, each a code of a later RocketMQ our broker answers
NOT_IN_498 = {"LITE_PULL_MESSAGE"}


def _javap() -> Path:
    try:
        _, javac = peers.find_java()
    except peers.JavaUnavailable as exc:
        pytest.skip(str(exc))
    javap = javac.with_name("javap")
    if not javap.is_file():
        pytest.skip(f"no javap next to {javac}")
    return javap


def _constants(jar: Path, cls: str) -> dict[str, int]:
    out = subprocess.run([str(_javap()), "-constants", "-cp", str(jar), cls], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    found = {m[1]: int(m[2]) for m in re.finditer(r"static final int (\w+) = (-?\d+);", out.stdout)}
    assert found, out.stdout   # the parse itself: a class without constants would make the test vacuous
    return found


def _ours(cls: type) -> dict[str, int]:
    return {k: v for k, v in vars(cls).items() if k.isupper() and isinstance(v, int)}


@pytest.fixture(scope="module")
def lib() -> Path:
    try:
        dist = peers.find_dist()
    except peers.JavaUnavailable as exc:
        pytest.skip(str(exc))
    if peers.dist_version(dist) != "4.9.8":       # another 4.9.x may have codes 4.9.8 has not
        pytest.skip(f"the codes are compared with RocketMQ 4.9.8's; {dist} is {peers.dist_version(dist)}")
    return dist / "lib"


def test_request_codes_are_rocketmq_498s(lib: Path) -> None:
    java = _constants(lib / "rocketmq-common-4.9.8.jar", "org.apache.rocketmq.common.protocol.RequestCode")
    ours = _ours(RequestCode)
    assert {k: v for k, v in ours.items() if k not in NOT_IN_498} == java


def test_later_request_codes_are_rocketmq_5s() -> None:
    try:
        dist = peers.find_dist5()      # $ROCKETSTREAM_RMQ5_DIST or ../shared/rocketmq-5.3.3
    except peers.JavaUnavailable as exc:
        pytest.skip(str(exc))
    jar = dist / "lib" / f"rocketmq-remoting-{peers.dist_version(dist)}.jar"
    java = _constants(jar, "org.apache.rocketmq.remoting.protocol.RequestCode")
    ours = _ours(RequestCode)
    assert {k: ours[k] for k in NOT_IN_498} == {k: java.get(k) for k in NOT_IN_498}


def test_response_codes_are_rocketmq_498s(lib: Path) -> None:
    java = _constants(lib / "rocketmq-common-4.9.8.jar", "org.apache.rocketmq.common.protocol.ResponseCode")
    java |= _constants(lib / "rocketmq-remoting-4.9.8.jar",
                       "org.apache.rocketmq.remoting.protocol.RemotingSysResponseCode")
    assert _ours(ResponseCode) == java
