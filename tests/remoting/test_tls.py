"""TLS on our server and client (remoting/tls.py, server.py, client.py): the three ``tls.server.mode``s, the
first-byte sniffing of permissive mode, client authentication, host name checks and the opt-outs, the typed
errors of every mismatch (at once, never a hang), a stalled handshake cut, frame limits still in force over
TLS, the key password never shown, and the broker.conf / client keywords that carry the settings."""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from pathlib import Path

import pytest

from rocketstream.client.tls import TlsConfig
from rocketstream.errors import OptionError, RemotingConnectError, StoreConfigError, TlsError
from rocketstream.remoting import RemotingCommand, RemotingServer, connect
from rocketstream.remoting.tls import ServerTlsConfig
from tests.remoting.tls_certs import KEY_PASSWORD, Certs, make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("tls-certs"))


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def server_tls(certs: Certs, mode: str, **kw) -> ServerTlsConfig:
    return ServerTlsConfig(mode=mode, cert_path=str(certs.srv_cert), key_path=str(certs.srv_key), **kw)


def client_ctx(certs: Certs, **kw) -> ssl.SSLContext:
    return TlsConfig(trust_cert_path=str(certs.ca), **kw).ssl_context()


async def _serving(tls: ServerTlsConfig | None, body, **server_kw):
    server = RemotingServer("127.0.0.1", 0, idle_timeout_s=None, tls=tls, **server_kw)
    server.register(1000, lambda ch, req: req.response(0, "pong", body=req.body))
    await server.start()
    try:
        return await body(server, server.address)
    finally:
        await server.stop()


async def _ping(addr: str, ctx: ssl.SSLContext | None, body: bytes = b"hello", **kw) -> RemotingCommand:
    ch = await connect(addr, ssl=ctx, **kw)
    try:
        return await ch.invoke(RemotingCommand.request(1000, {}, body), timeout=5)
    finally:
        await ch.aclose()


def test_enforcing_serves_tls_and_closes_plain_at_once(certs):
    async def body(server, addr):
        resp = await _ping(addr, client_ctx(certs), b"x" * 300_000)   # a frame over several TLS records
        assert (resp.code, resp.remark, resp.body) == (0, "pong", b"x" * 300_000)
        ch = await connect(addr)
        started = time.monotonic()
        with pytest.raises(RemotingConnectError, match="enforces TLS") as err:
            await ch.invoke(RemotingCommand.request(1000, {}, b"plain"), timeout=5)
        assert time.monotonic() - started < 2.0   # closed at once, not the request's timeout
        assert err.value.addr == addr
        await ch.aclose()
        assert not server.channels or all(c.closed for c in server.channels)

    run(_serving(server_tls(certs, "enforcing"), body))


def test_permissive_serves_tls_and_plain_on_one_port(certs):
    async def body(server, addr):
        tls_resp, plain_resp = await asyncio.gather(_ping(addr, client_ctx(certs), b"tls"),
                                                    _ping(addr, None, b"plain"))
        assert (tls_resp.code, tls_resp.body) == (0, b"tls")
        assert (plain_resp.code, plain_resp.body) == (0, b"plain")

    run(_serving(server_tls(certs, "permissive"), body))


def test_default_mode_is_permissive_with_a_certificate_else_disabled(certs):
    assert ServerTlsConfig().mode == "disabled" and not ServerTlsConfig().enabled
    assert ServerTlsConfig(cert_path=str(certs.srv_cert), key_path=str(certs.srv_key)).mode == "permissive"
    with pytest.raises(OptionError, match="tls.server.certPath"):
        ServerTlsConfig(mode="enforcing")
    with pytest.raises(OptionError, match="tls.server.mode"):
        ServerTlsConfig(mode="strict", cert_path=str(certs.srv_cert), key_path=str(certs.srv_key))
    with pytest.raises(OptionError, match="tls.server.need.client.auth"):
        server_tls(certs, "enforcing", need_client_auth="always")


def test_tls_client_against_a_plain_server_is_a_tls_error_at_once(certs):
    async def body(server, addr):
        started = time.monotonic()
        with pytest.raises(TlsError, match="TLS handshake failed") as err:
            await _ping(addr, client_ctx(certs))
        assert time.monotonic() - started < 2.0
        assert err.value.addr == addr

    run(_serving(None, body))
    run(_serving(ServerTlsConfig(mode="disabled"), body))


def test_wrong_ca_wrong_host_name_and_the_opt_outs(certs):
    async def body(server, addr):
        port = addr.rsplit(":", 1)[1]
        with pytest.raises(TlsError, match="certificate verify failed") as err:
            await _ping(addr, TlsConfig(trust_cert_path=str(certs.other_ca)).ssl_context())
        assert err.value.addr == addr
        # the certificate names 127.0.0.1 only: "localhost" is the wrong host
        with pytest.raises(TlsError, match="certificate verify failed.*(Hostname|IP address) mismatch"):
            await _ping(f"localhost:{port}", client_ctx(certs))
        assert (await _ping(f"localhost:{port}", client_ctx(certs, verify_hostname=False))).code == 0
        # verify_hostname=False still checks the certificate
        with pytest.raises(TlsError, match="certificate verify failed"):
            await _ping(addr, TlsConfig(trust_cert_path=str(certs.other_ca), verify_hostname=False).ssl_context())
        # test mode checks nothing (tls.test.mode.enable)
        assert (await _ping(addr, TlsConfig(trust_cert_path=str(certs.other_ca), test_mode=True).ssl_context())
                ).code == 0
        # the system trust store does not know our CA
        with pytest.raises(TlsError, match="certificate verify failed"):
            await _ping(addr, TlsConfig().ssl_context())

    run(_serving(server_tls(certs, "enforcing"), body))


def test_mutual_tls_require_and_optional(certs):
    with_cert = dict(cert_path=str(certs.client_cert), key_path=str(certs.client_key))

    async def require(server, addr):
        assert (await _ping(addr, client_ctx(certs, **with_cert))).code == 0
        started = time.monotonic()
        with pytest.raises(RemotingConnectError, match="(?i)certificate") as err:
            await _ping(addr, client_ctx(certs))   # TLS 1.3: the server's alert comes after the client's Finished
        assert time.monotonic() - started < 2.0
        assert err.value.addr == addr

    run(_serving(server_tls(certs, "enforcing", need_client_auth="require", trust_cert_path=str(certs.ca)),
                 require))

    async def optional(server, addr):
        assert (await _ping(addr, client_ctx(certs, **with_cert))).code == 0
        assert (await _ping(addr, client_ctx(certs))).code == 0

    run(_serving(server_tls(certs, "enforcing", need_client_auth="optional", trust_cert_path=str(certs.ca)),
                 optional))

    async def untrusted_client(server, addr):
        # the server trusts another CA than the one that signed the client's certificate
        with pytest.raises(RemotingConnectError, match="(?i)(unknown ca|certificate)"):
            await _ping(addr, client_ctx(certs, **with_cert))

    run(_serving(server_tls(certs, "enforcing", need_client_auth="require", trust_cert_path=str(certs.other_ca)),
                 untrusted_client))


def test_a_stalled_handshake_is_cut_and_the_server_keeps_serving(certs):
    async def body(server, addr):
        host, port = addr.rsplit(":", 1)
        loop = asyncio.get_running_loop()
        sock = socket.create_connection((host, int(port)))
        sock.setblocking(False)
        try:
            await loop.sock_sendall(sock, b"\x16\x03\x01\x02\x00")   # a ClientHello's record header, then nothing
            started = time.monotonic()
            assert await asyncio.wait_for(loop.sock_recv(sock, 100), 10) == b""   # closed by the server
            assert 0.3 <= time.monotonic() - started < 5
        finally:
            sock.close()
        assert (await _ping(addr, client_ctx(certs))).code == 0

    run(_serving(server_tls(certs, "permissive", handshake_timeout_s=0.5), body))


def test_frame_limits_hold_over_tls(certs):
    async def body(server, addr):
        ch = await connect(addr, ssl=client_ctx(certs))
        ch.max_frame = 1 << 30   # our side would send it; the server's limit is 4 KiB
        with pytest.raises(RemotingConnectError):
            await ch.invoke(RemotingCommand.request(1000, {}, b"y" * 8192), timeout=5)
        await ch.aclose()
        assert (await _ping(addr, client_ctx(certs))).code == 0

    run(_serving(server_tls(certs, "enforcing"), body, max_frame=4096))


def test_encrypted_key_password_is_used_and_never_shown(certs, caplog):
    cfg = ServerTlsConfig(mode="enforcing", cert_path=str(certs.srv_cert), key_path=str(certs.srv_key_encrypted),
                          key_password=KEY_PASSWORD)
    assert KEY_PASSWORD not in repr(cfg) and "<hidden>" in repr(cfg)

    async def body(server, addr):
        assert (await _ping(addr, client_ctx(certs))).code == 0

    run(_serving(cfg, body))
    wrong = ServerTlsConfig(mode="enforcing", cert_path=str(certs.srv_cert), key_path=str(certs.srv_key_encrypted),
                            key_password=KEY_PASSWORD + "-wrong")
    with pytest.raises(OptionError, match="tls.server.keyPath") as err:
        wrong.ssl_context()
    assert KEY_PASSWORD not in str(err.value)
    with pytest.raises(OptionError, match="tls.server.keyPath"):   # encrypted, no password: no tty prompt
        ServerTlsConfig(mode="enforcing", cert_path=str(certs.srv_cert),
                        key_path=str(certs.srv_key_encrypted)).ssl_context()
    assert KEY_PASSWORD not in caplog.text


def test_broker_conf_tls_settings(certs, tmp_path):
    from rocketstream.broker import BrokerConfig

    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={tmp_path / 'store'}\n"
                    "tls.server.mode=enforcing\n"
                    f"tls.server.certPath={certs.srv_cert}\n"
                    f"tls.server.keyPath={certs.srv_key_encrypted}\n"
                    f"tls.server.keyPassword={KEY_PASSWORD}\n"
                    f"tls.server.trustCertPath={certs.ca}\n"
                    "tls.server.need.client.auth=optional\n"
                    "tls.enable=true\n"
                    f"tls.client.trustCertPath={certs.ca}\n")
    cfg = BrokerConfig.from_conf(conf)
    assert cfg.tls_mode == "enforcing"
    assert cfg.tls_server == ServerTlsConfig(mode="enforcing", cert_path=str(certs.srv_cert),
                                             key_path=str(certs.srv_key_encrypted), key_password=KEY_PASSWORD,
                                             trust_cert_path=str(certs.ca), need_client_auth="optional")
    assert cfg.tls_client == TlsConfig(trust_cert_path=str(certs.ca))
    assert KEY_PASSWORD not in repr(cfg)
    from rocketstream.broker.admin import config_properties

    assert KEY_PASSWORD not in repr(config_properties(cfg))   # GET_BROKER_CONFIG (mqadmin getBrokerConfig)

    plain = tmp_path / "plain.conf"
    plain.write_text(f"storePathRootDir={tmp_path / 'store'}\ntls.enable=false\n"
                     f"tls.client.trustCertPath={certs.ca}\n")
    cfg = BrokerConfig.from_conf(plain)
    assert (cfg.tls_mode, cfg.tls_server, cfg.tls_client) == ("disabled", None, None)

    for line, name in (("tls.server.mode=on", "tls.server.mode"),
                       ("tls.server.mode=enforcing", "tls.server.certPath"),
                       ("tls.server.certPath=/nowhere.pem", "tls.server.certPath"),
                       ("tls.server.certpath=/x.pem", "tls.server.certpath"),
                       ("tls.server.keyPassWord=x", "tls.server.keyPassWord")):
        bad = tmp_path / "bad.conf"
        bad.write_text(f"storePathRootDir={tmp_path / 'store'}\n{line}\n")
        with pytest.raises(StoreConfigError, match=name.replace(".", r"\.")) as err:
            BrokerConfig.from_conf(bad)
        assert str(bad) in str(err.value)


def test_client_keywords_carry_tls(certs):
    from rocketstream.client import LitePullConsumer, Producer
    from rocketstream.client.instance import MQClientInstance

    tls = TlsConfig(trust_cert_path=str(certs.ca))
    assert Producer("pg", namesrv="127.0.0.1:1", tls=True).tls == TlsConfig()
    assert Producer("pg", namesrv="127.0.0.1:1", tls=tls).tls is tls
    assert Producer("pg", namesrv="127.0.0.1:1").tls is None
    with pytest.raises(OptionError, match="tls"):
        Producer("pg", namesrv="127.0.0.1:1", tls="yes")   # type: ignore[arg-type]
    assert LitePullConsumer("cg", namesrv="127.0.0.1:1", tls=True).config.tls == TlsConfig()
    name = f"tls-registry-{time.monotonic_ns()}"
    a = MQClientInstance.get("127.0.0.1:1", name, tls=tls)
    plain = MQClientInstance.get("127.0.0.1:1", name)
    assert a is not plain and a.api.tls is tls and plain.api.tls is None
    assert MQClientInstance.get("127.0.0.1:1", name, tls=TlsConfig(trust_cert_path=str(certs.ca))) is a
    for inst in (a, plain):
        MQClientInstance._registry.pop((inst.namesrv, inst.instance_name, inst.api.credentials, inst.api.tls), None)


def test_client_api_over_tls_to_our_name_server(certs):
    """MQClientAPI(tls=...) reaches an enforcing name server; without tls it gets the clear error."""
    from rocketstream.client.api import MQClientAPI
    from rocketstream.namesrv import NamesrvConfig, NamesrvController

    async def body():
        ns = await NamesrvController(NamesrvConfig(port=0, tls=server_tls(certs, "enforcing"))).start()
        try:
            api = MQClientAPI(ns.address, tls=TlsConfig(trust_cert_path=str(certs.ca)))
            try:
                assert await api.get_route("NoSuchTopic") is None   # TOPIC_NOT_EXIST, answered over TLS
                assert api.open_channel(ns.address)._transport.get_extra_info("ssl_object") is not None
            finally:
                await api.close()
            plain = MQClientAPI(ns.address)
            try:
                with pytest.raises(RemotingConnectError, match="enforces TLS"):
                    await plain.get_route("NoSuchTopic")
            finally:
                await plain.close()
        finally:
            await ns.stop()

    run(body())


def test_certificate_paths_are_checked(tmp_path: Path):
    with pytest.raises(OptionError, match="tls.server.certPath"):
        ServerTlsConfig(mode="enforcing", cert_path=str(tmp_path / "nope.pem"), key_path=str(tmp_path / "k"))
