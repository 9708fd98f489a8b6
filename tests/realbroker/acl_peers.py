"""ACL-enabled clusters for tests: the real 4.9.8 name server + broker, or ``rocketstream serve``, with
``aclEnable=true`` and a given ``plain_acl.yml``; shared by tests/broker/test_acl.py,
tests/spark/test_secured.py and tests/test_cli_secured.py."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.realbroker import peers


def two_accounts_yml(ak: str, sk: str, reader_ak: str, reader_sk: str) -> str:
    """A plain_acl.yml of a writer (PUB|SUB on every topic and group) and a reader (SUB only), not admins."""
    return f"""\
accounts:
  - accessKey: {ak}
    secretKey: {sk}
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
  - accessKey: {reader_ak}
    secretKey: {reader_sk}
    admin: false
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
"""


@contextmanager
def ours_with_acl(home: Path, yml: str, extra_conf: dict[str, str] | None = None) -> Iterator[SimpleNamespace]:
    """``rocketstream serve`` (name server + broker) with aclEnable=true (and ``extra_conf``); its store's
    conf/plain_acl.yml is ``yml``. Yields start_serve's handle (``namesrv_addr``, ``broker_port``, ...); asserts
    a clean stop."""
    from tests.broker.conftest import start_serve, stop_serve

    store = home / "store"
    (store / "conf").mkdir(parents=True)
    (store / "conf" / "plain_acl.yml").write_text(yml)
    served = start_serve(home, conf={**(extra_conf or {}), "aclEnable": "true"}, store=store)
    try:
        yield served
    finally:
        assert stop_serve(served) == 0


@contextmanager
def java_with_acl(home: Path, yml: str, extra_conf: dict[str, str] | None = None) -> Iterator[SimpleNamespace]:
    """The real 4.9.8 name server + broker with aclEnable=true (and ``extra_conf``) reading
    ``home/plain_acl.yml``; skips the test
    when Java or the distribution is missing. Yields ``home``, ``yml`` (the file), ``namesrv``, ``broker``
    (addresses) and ``broker_server`` (peers.Server)."""
    try:
        peers.find_java()
        dist = peers.find_dist()
    except peers.JavaUnavailable as exc:
        pytest.skip(f"real broker unavailable: {exc}")
    path = home / "plain_acl.yml"
    path.write_text(yml)
    # PlainPermissionManager reads ${rocketmq.home.dir}/${rocketmq.acl.plain.file}; the path is normalized,
    # so a relative path leads out of the (shared, read-only) distribution to our file
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JAVA_TOOL_OPTIONS", f"-Drocketmq.acl.plain.file={os.path.relpath(path, dist)}")
        ns = peers.start_namesrv(home)
        try:
            ns.wait_ready()
            br = peers.start_broker(home, ns.port, extra_conf={**(extra_conf or {}), "aclEnable": "true"})
        except BaseException:
            ns.kill()
            raise
    try:
        br.wait_ready()
        yield SimpleNamespace(home=home, yml=path, namesrv=f"127.0.0.1:{ns.port}", broker=f"127.0.0.1:{br.port}",
                              broker_server=br)
    finally:
        br.kill()
        ns.kill()
