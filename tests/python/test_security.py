"""rtrain.connect with TLS and bearer tokens against a real rtraind that
serves TLS with a tokens file, and with mutual TLS: a daemon that also
requires client certificates (--tls-client-ca) refuses a client without
one or with one another CA signed, and one with the right certificate
trains (certificates made with the openssl CLI)."""
import os
import re
import subprocess

import numpy as np
import pytest

import rtrain
from conftest import load_iris, stratified_split

EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _run(args, cwd):
    subprocess.run(args, cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    _run(["openssl", "req", "-x509", *EC, "-keyout", "ca.key", "-out", "ca.pem",
          "-days", "2", "-subj", "/CN=py-ca"], d)
    _run(["openssl", "req", *EC, "-keyout", "srv.key", "-out", "srv.csr",
          "-subj", "/CN=rtraind"], d)
    _run(["openssl", "x509", "-req", "-in", "srv.csr", "-CA", "ca.pem",
          "-CAkey", "ca.key", "-CAcreateserial", "-out", "srv.pem", "-days", "2",
          "-extfile", "san.ext"], d)
    _run(["openssl", "req", "-x509", *EC, "-keyout", "other.key", "-out",
          "other.pem", "-days", "2", "-subj", "/CN=other-ca"], d)
    exe = os.environ["RTRAIND"]
    gen = subprocess.run([exe, "--new-token", "py"], check=True, text=True,
                         capture_output=True)
    token = gen.stderr.strip().split()[-1]
    (d / "tokens.txt").write_text(gen.stdout + "\n")
    (d / "token").write_text(token + "\n")
    proc = subprocess.Popen(
        [exe, "--listen", "127.0.0.1:0", "--log-level", "warn",
         "--tls-cert", str(d / "srv.pem"), "--tls-key", str(d / "srv.key"),
         "--tokens", str(d / "tokens.txt")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    m = re.search(r"listening on (\S+)", proc.stdout.readline())
    assert m, "rtraind did not start"
    yield {"addr": m.group(1), "dir": d, "token": token}
    proc.terminate()
    proc.wait(timeout=20)


def test_tls_and_token(secure):
    d = secure["dir"]
    c = rtrain.connect(secure["addr"], tls_ca=d / "ca.pem", token=secure["token"])
    assert c.ping() >= 0
    c.close()


def test_token_file_and_environment(secure, monkeypatch):
    d = secure["dir"]
    c = rtrain.connect(secure["addr"], tls_ca=str(d / "ca.pem"),
                       token_file=d / "token")
    c.close()
    monkeypatch.setenv("RTRAIN_TLS_CA", str(d / "ca.pem"))
    monkeypatch.setenv("RTRAIN_TOKEN", secure["token"])
    c = rtrain.connect(secure["addr"])
    c.close()


def test_refused(secure, monkeypatch):
    d = secure["dir"]
    for var in ("RTRAIN_TLS_CA", "RTRAIN_TOKEN", "RTRAIN_TOKEN_FILE"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(rtrain.Unauthenticated):
        rtrain.connect(secure["addr"], tls_ca=d / "ca.pem")
    with pytest.raises(rtrain.Unauthenticated):
        rtrain.connect(secure["addr"], tls_ca=d / "ca.pem", token="0" * 64)
    with pytest.raises(rtrain.ConnectionError):
        rtrain.connect(secure["addr"], tls_ca=d / "other.pem",
                       token=secure["token"])
    with pytest.raises(rtrain.Error, match="cannot read CA"):
        rtrain.connect(secure["addr"], tls_ca=d / "missing.pem")


@pytest.fixture(scope="module")
def mutual(secure, tmp_path_factory):
    """A second daemon with --tls-client-ca (the CA of `secure`), a client
    certificate that CA signed and one another CA signed."""
    d = secure["dir"]
    _run(["openssl", "req", *EC, "-keyout", "cli.key", "-out", "cli.csr",
          "-subj", "/CN=py-client"], d)
    _run(["openssl", "x509", "-req", "-in", "cli.csr", "-CA", "ca.pem",
          "-CAkey", "ca.key", "-CAcreateserial", "-out", "cli.pem", "-days", "2"], d)
    _run(["openssl", "req", *EC, "-keyout", "stranger.key", "-out",
          "stranger.csr", "-subj", "/CN=py-stranger"], d)
    _run(["openssl", "x509", "-req", "-in", "stranger.csr", "-CA", "other.pem",
          "-CAkey", "other.key", "-CAcreateserial", "-out", "stranger.pem",
          "-days", "2"], d)
    proc = subprocess.Popen(
        [os.environ["RTRAIND"], "--listen", "127.0.0.1:0", "--log-level", "warn",
         "--tls-cert", str(d / "srv.pem"), "--tls-key", str(d / "srv.key"),
         "--tls-client-ca", str(d / "ca.pem"), "--tokens", str(d / "tokens.txt")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    m = re.search(r"listening on (\S+)", proc.stdout.readline())
    assert m, "rtraind with --tls-client-ca did not start"
    yield {"addr": m.group(1), "dir": d, "token": secure["token"]}
    proc.terminate()
    proc.wait(timeout=20)


def test_mtls_refused(mutual, monkeypatch):
    d = mutual["dir"]
    for var in ("RTRAIN_TLS_CA", "RTRAIN_TLS_CERT", "RTRAIN_TLS_KEY"):
        monkeypatch.delenv(var, raising=False)
    # the handshake fails: no client certificate, or one of another CA
    with pytest.raises(rtrain.ConnectionError):
        rtrain.connect(mutual["addr"], tls_ca=d / "ca.pem", token=mutual["token"])
    with pytest.raises(rtrain.ConnectionError):
        rtrain.connect(mutual["addr"], tls_ca=d / "ca.pem", token=mutual["token"],
                       tls_cert=d / "stranger.pem", tls_key=d / "stranger.key")
    # the certificate proves the machine, the token the principal
    with pytest.raises(rtrain.Unauthenticated):
        rtrain.connect(mutual["addr"], tls_ca=d / "ca.pem",
                       tls_cert=d / "cli.pem", tls_key=d / "cli.key")


def test_mtls_trains(mutual):
    d = mutual["dir"]
    c = rtrain.connect(mutual["addr"], tls_ca=d / "ca.pem", token=mutual["token"],
                       tls_cert=d / "cli.pem", tls_key=d / "cli.key")
    xtr, ytr, xte, yte = stratified_split(*load_iris())
    model = c.compile(rtrain.Sequential([
        rtrain.layers.Dense(32, activation="relu", input_shape=(4,)),
        rtrain.layers.Dense(3, activation="softmax")]),
        optimizer=rtrain.optimizers.Adam(0.05), loss="sparse_categorical_crossentropy",
        metrics=["accuracy"], seed=1)
    hist = model.fit(xtr, ytr, batch_size=16, epochs=40, verbose=0)
    assert hist["loss"][-1] < hist["loss"][0]
    loss, acc = model.evaluate(xte, yte)
    assert acc >= 0.9, acc
    p = model.predict(xte)
    assert acc == pytest.approx(np.mean(p.argmax(axis=1) == yte), abs=1e-9)
    c.close()
