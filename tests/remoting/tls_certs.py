"""Certificates for the TLS tests, made by the ``openssl`` command line in a test's directory (nothing is
committed): a CA, a server certificate for 127.0.0.1 signed by it (its key also as PKCS#8 PEM, plain and
encrypted, as RocketMQ's Netty takes), a client certificate for mutual TLS, and a second CA that signed
nothing of the server's (the "wrong CA")."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

KEY_PASSWORD = "tls-test-key-password-7f3a"
_NEWKEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")   # P-256: made in milliseconds


@dataclass(frozen=True)
class Certs:
    dir: Path
    ca: Path              # the CA that signed srv and client
    srv_cert: Path        # subjectAltName IP:127.0.0.1 only (so "localhost" is a wrong host name)
    srv_key: Path         # PKCS#8 PEM, unencrypted
    srv_key_encrypted: Path   # PKCS#8 PEM, encrypted with KEY_PASSWORD
    client_cert: Path
    client_key: Path      # PKCS#8 PEM
    other_ca: Path        # a CA that signed nothing here


def _openssl(cwd: Path, *args: str) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {done.stderr}")


def _ca(d: Path, name: str) -> None:
    _openssl(d, "req", "-x509", *_NEWKEY, "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem",
             "-days", "2", "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")


def _leaf(d: Path, name: str, ca: str, ext: str) -> None:
    (d / f"{name}.ext").write_text(ext + "\n")
    _openssl(d, "req", *_NEWKEY, "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", f"/CN={name}")
    _openssl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext")
    _openssl(d, "pkcs8", "-topk8", "-nocrypt", "-in", f"{name}.key", "-out", f"{name}.pk8")


def make_certs(d: Path) -> Certs:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command line is needed to make the TLS tests' certificates")
    d.mkdir(parents=True, exist_ok=True)
    _ca(d, "ca")
    _ca(d, "otherca")
    _leaf(d, "srv", "ca", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth")
    _leaf(d, "client", "ca", "extendedKeyUsage=clientAuth")
    _openssl(d, "pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", "srv.key", "-out", "srv.enc.pk8",
             "-passout", f"pass:{KEY_PASSWORD}")
    return Certs(d, d / "ca.pem", d / "srv.pem", d / "srv.pk8", d / "srv.enc.pk8", d / "client.pem",
                 d / "client.pk8", d / "otherca.pem")
