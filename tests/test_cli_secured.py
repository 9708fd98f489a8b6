"""The CLI against a secured cluster: ``--access-key/--secret-key/--security-token`` or ``ROCKETMQ_ACCESS_KEY`` /
``ROCKETMQ_SECRET_KEY`` / ``ROCKETMQ_SECURITY_TOKEN``, ``--namespace``, and the TLS flags, on every command that
talks to a cluster (produce, consume, consumer-progress), against our broker with ``aclEnable=true``
(the real 4.9.8's answers to the same commands: tests/spark/test_secured.py). A wrong secret or a missing
permission is the broker's answer (address, request, remark) at once, and no secret is ever printed."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rocketstream import cli
from tests.client.scenario_util import unique
from tests.realbroker import acl_peers

AK, SK, TOKEN = "cliuser", "cli-SECRET-0451", "cli-TOKEN-7788"
READER_AK, READER_SK = "clireader", "reader-SECRET-1234"
ACL_YML = acl_peers.two_accounts_yml(AK, SK, READER_AK, READER_SK)
SIGNATURE_FAILED = "Check signature failed for accessKey="
SECRETS = (SK, TOKEN, READER_SK, "WRONG-secret-0000")


@pytest.fixture(scope="module")
def acl_ours(tmp_path_factory: pytest.TempPathFactory):
    """``rocketstream serve`` with aclEnable=true and the accounts of ACL_YML."""
    with acl_peers.ours_with_acl(tmp_path_factory.mktemp("cli-acl"), ACL_YML) as served:
        yield served


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str, float]:
    t0 = time.monotonic()
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    for secret in SECRETS:
        assert secret not in out and secret not in err, (argv, out[-500:], err[-500:])
    return code, out, err, time.monotonic() - t0


def test_produce_consume_progress_with_env_credentials_and_namespace(acl_ours, capsys, monkeypatch) -> None:
    ns = f"127.0.0.1:{acl_ours.namesrv_port}"
    topic, group = unique("CliSecT"), unique("CliSecG")
    monkeypatch.setenv(cli.ENV_ACCESS_KEY, AK)
    monkeypatch.setenv(cli.ENV_SECRET_KEY, SK)
    monkeypatch.setenv(cli.ENV_SECURITY_TOKEN, TOKEN)
    code, out, err, _ = _run(capsys, "produce", "--namesrv", ns, "--topic", topic, "--count", "12", "--json",
                             "--namespace", "nsA")
    assert code == 0, err
    summary = json.loads(out.splitlines()[-1])["summary"]
    assert summary["sent"] == 12 and summary["statuses"] == {"SEND_OK": 12}
    # consume: the flag wins over the environment's access key; rows show the user's topic
    monkeypatch.setenv(cli.ENV_ACCESS_KEY, "somebody-else")
    code, out, err, _ = _run(capsys, "consume", "--namesrv", ns, "--group", group, "--topic", topic, "--from",
                             "first", "--count", "12", "--idle-timeout", "30", "--json", "--namespace", "nsA",
                             "--access-key", AK)
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == 12 and {r["topic"] for r in rows} == {topic}
    # the group's offsets are those of nsA%group on nsA%topic
    code, out, err, _ = _run(capsys, "consumer-progress", "--namesrv", ns, "--group", group, "--json",
                             "--namespace", "nsA", "--access-key", AK)
    assert code == 0, err
    progress = json.loads(out)
    assert {q["topic"] for q in progress["queues"]} == {topic}
    assert sum(q["brokerOffset"] for q in progress["queues"]) == 12
    # without the namespace the topic is another one, which does not exist
    code, out, err, _ = _run(capsys, "consumer-progress", "--namesrv", ns, "--group", group, "--access-key", AK)
    assert code == 2


@pytest.mark.parametrize("command", ["produce", "consume", "consumer-progress"])
def test_wrong_secret_is_the_brokers_answer_at_once(acl_ours, capsys, command: str) -> None:
    ns = f"127.0.0.1:{acl_ours.namesrv_port}"
    broker = f"127.0.0.1:{acl_ours.broker_port}"
    topic, group = unique("CliBadT"), unique("CliBadG")
    args = {"produce": ["--topic", topic, "--count", "3"],
            "consume": ["--group", group, "--topic", "TBW102", "--idle-timeout", "60"],
            "consumer-progress": ["--group", group]}[command]
    if command == "consumer-progress":   # a group the brokers know (its %RETRY% route is asked first)
        good = ("--namesrv", ns, "--access-key", AK, "--secret-key", SK)
        assert _run(capsys, "produce", *good, "--topic", topic, "--count", "1")[0] == 0
        assert _run(capsys, "consume", *good, "--group", group, "--topic", topic, "--from", "first", "--count",
                    "1", "--idle-timeout", "30")[0] == 0
    code, out, err, seconds = _run(capsys, command, "--namesrv", ns, *args, "--access-key", AK,
                                   "--secret-key", "WRONG-secret-0000")
    assert code == 2, (out, err)
    assert SIGNATURE_FAILED + AK in err and broker in err, err
    assert seconds < 20, seconds   # no retry loop, no idle wait (the consume would wait 60 s)


def test_missing_permission_is_the_brokers_answer(acl_ours, capsys) -> None:
    ns = f"127.0.0.1:{acl_ours.namesrv_port}"
    code, out, err, seconds = _run(capsys, "produce", "--namesrv", ns, "--topic", unique("CliNoPubT"), "--count",
                                   "1", "--access-key", READER_AK, "--secret-key", READER_SK)
    assert code == 2 and "AclException: No default permission for topic" in err, err
    assert f"127.0.0.1:{acl_ours.broker_port}" in err and "send to" in err, err
    assert seconds < 20, seconds


@pytest.mark.parametrize("flags, option", [
    (["--access-key", AK], "--access-key"),
    (["--namespace", "nsA"], "--namespace"),
    (["--tls"], "--tls"),
])
def test_secured_flags_need_a_cluster(tmp_path: Path, capsys, flags: list[str], option: str) -> None:
    code, out, err, _ = _run(capsys, "produce", "--store", str(tmp_path / "store"), "--topic", "T", "--count", "1",
                             *flags)
    assert code == 2 and f"option '{option}'" in err and "--namesrv" in err, err


def test_bad_secured_values_name_their_flag(capsys, monkeypatch) -> None:
    monkeypatch.delenv(cli.ENV_ACCESS_KEY, raising=False)
    monkeypatch.delenv(cli.ENV_SECRET_KEY, raising=False)
    for flags, option in ((["--secret-key", "WRONG-secret-0000"], "--access-key"),
                          (["--access-key", AK], "--secret-key"),
                          (["--namespace", "a%b"], "--namespace"),
                          (["--tls-trust-cert", "/nonexistent/ca.pem"], "--tls-trust-cert")):
        code, out, err, _ = _run(capsys, "consumer-progress", "--namesrv", "127.0.0.1:1", "--group", "g", *flags)
        assert code == 2 and f"option '{option}'" in err, (flags, err)


@pytest.fixture(scope="module")
def client_keys(tmp_path_factory):
    """The test CA's client certificate with its key in clear and encrypted (PKCS#8, aes-256-cbc)."""
    import subprocess

    from tests.remoting.tls_certs import make_certs

    certs = make_certs(tmp_path_factory.mktemp("cli-tls"))
    encrypted = certs.dir / "client.enc.pk8"
    subprocess.run(["openssl", "pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", str(certs.client_key), "-out",
                    str(encrypted), "-passout", f"pass:{KEY_PASSWORD}"], check=True, capture_output=True)
    return certs, encrypted


KEY_PASSWORD = "cli-key-password-5d1e"


def test_tls_key_password_from_env_or_flag_and_never_shown(client_keys, capsys, monkeypatch) -> None:
    certs, encrypted = client_keys
    base = ["consumer-progress", "--namesrv", "127.0.0.1:1", "--group", "g", "--tls-trust-cert", str(certs.ca),
            "--tls-cert", str(certs.client_cert), "--tls-key", str(encrypted)]
    monkeypatch.delenv(cli.ENV_TLS_KEY_PASSWORD, raising=False)
    parser = cli.build_parser()
    # the key is loaded when the flags are read: with its password (the environment's, or the flag's)
    monkeypatch.setenv(cli.ENV_TLS_KEY_PASSWORD, KEY_PASSWORD)
    secured = cli._secured(parser.parse_args(base), network=True)
    assert secured.tls.key_password == KEY_PASSWORD and KEY_PASSWORD not in repr(secured)
    monkeypatch.delenv(cli.ENV_TLS_KEY_PASSWORD)
    secured = cli._secured(parser.parse_args([*base, "--tls-key-password", KEY_PASSWORD]), network=True)
    assert secured.tls.ssl_context() is not None
    # a wrong password, none for an encrypted key (no terminal prompt), a password without a key: typed, at once
    for flags, option in ((["--tls-key-password", "not-the-password"], "--tls-key-password"),
                          ([], "--tls-key")):
        code, _out, err, took = _run(capsys, *base, *flags)
        assert code == 2 and f"option '{option}'" in err and str(encrypted) in err, (flags, err)
        assert "not-the-password" not in err and took < 10
    code, _out, err, _ = _run(capsys, "consumer-progress", "--namesrv", "127.0.0.1:1", "--group", "g", "--tls",
                              "--tls-key-password", KEY_PASSWORD)
    assert code == 2 and "option '--tls-key-password'" in err and KEY_PASSWORD not in err, err
    # the key in clear needs none
    plain = [*base[:-1], str(certs.client_key)]
    assert cli._secured(parser.parse_args(plain), network=True).tls.key_password is None
