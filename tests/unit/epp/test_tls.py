"""TLS on the picker's gRPC port: the config checks its files at load, the reload rule
(changed files replace the pair only when they read whole; the last good pair stays
otherwise), and the real server: a TLS client is served, a cleartext one refused, mutual
TLS asks for a client certificate, and a new handshake after the files are replaced
presents the new certificate."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gateway.app import create_app
from gateway.config.schema import ConfigError, EppTlsConfig, load_config_bytes
from gateway.epp.server import start_picker
from gateway.epp.tls import CertificateReloader
from gateway.epp.tls_files import Stamp, TlsFileError, TlsMaterial
from tests.unit.epp.certs import SERVER_NAME, Issued, TestCa
from tests.unit.gateway.fakes import FakeBackend, FakeFleet, make_config


@pytest.fixture(scope="module")
def ca() -> TestCa:
    return TestCa()


@pytest.fixture
def files(tmp_path: Path, ca: TestCa) -> dict[str, Path]:
    out = {
        "cert_file": tmp_path / "tls.crt",
        "key_file": tmp_path / "tls.key",
        "client_ca_file": tmp_path / "ca.crt",
    }
    ca.issue("picker").write(out["cert_file"], out["key_file"])
    out["client_ca_file"].write_bytes(ca.cert_pem)
    return out


def _load(tls: dict[str, Path]) -> list[str]:
    text = "backends: [{name: a, url: 'http://a.test', models: [tiny]}]\nepp:\n  tls:\n"
    text += "".join(f"    {k}: '{v}'\n" for k, v in tls.items())
    try:
        load_config_bytes(text.encode())
    except ConfigError as exc:
        return [str(i) for i in exc.issues]
    return []


def test_good_files_load(files: dict[str, Path]) -> None:
    assert _load(files) == []
    assert _load({k: files[k] for k in ("cert_file", "key_file")}) == []


@pytest.mark.parametrize(
    ("spoil", "said"),
    [
        ("missing", "cert_file"),
        ("garbage", "cert_file"),
        ("other_key", "key_file"),
        ("garbage_ca", "client_ca_file"),
    ],
)
def test_bad_files_are_a_config_error_at_their_line(
    files: dict[str, Path], ca: TestCa, spoil: str, said: str
) -> None:
    if spoil == "missing":
        files["cert_file"] = files["cert_file"].with_name("absent.crt")
    elif spoil == "garbage":
        files["cert_file"].write_text("not a certificate\n")
    elif spoil == "other_key":
        files["key_file"].write_bytes(ca.issue("someone else").key_pem)
    else:
        files["client_ca_file"].write_text("-----BEGIN CERTIFICATE-----\nnope\n")
    (issue,) = _load(files)
    assert ":3: epp.tls:" in issue and said in issue, issue


# -- the reload rule, with injected files ------------------------------------------------


class FakeFiles:
    """Stamps and reads under the test's control: each read hands out the next outcome."""

    def __init__(self) -> None:
        self.stamp: Stamp = ((1, 1, 1),)
        self.outcomes: list[TlsMaterial | Exception] = [_material(b"first")]
        self.reads = 0

    def stamp_files(self) -> Stamp:
        return self.stamp

    def read(self) -> TlsMaterial:
        self.reads += 1
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def _material(tag: bytes) -> TlsMaterial:
    return TlsMaterial(b"cert " + tag, b"key " + tag, None)


def test_unchanged_files_are_not_read_again() -> None:
    fake = FakeFiles()
    reloader = CertificateReloader(fake.read, fake.stamp_files)
    assert [reloader.fetch() for _ in range(3)] == [None, None, None]
    assert fake.reads == 1


def test_changed_files_that_read_whole_replace_the_pair() -> None:
    fake = FakeFiles()
    reloader = CertificateReloader(fake.read, fake.stamp_files)
    first = reloader.material
    second = _material(b"second")
    fake.stamp, fake.outcomes = ((2, 1, 1),), [second]
    assert reloader.fetch() is second
    assert reloader.material is second and reloader.material is not first
    assert reloader.fetch() is None  # the same files: nothing new
    assert (reloader.counts.loaded, reloader.counts.failed) == (1, 0)


def test_a_failed_read_keeps_the_last_good_pair_until_the_files_change_again() -> None:
    fake = FakeFiles()
    reloader = CertificateReloader(fake.read, fake.stamp_files)
    good = reloader.material
    fake.stamp, fake.outcomes = ((2, 1, 1),), [TlsFileError("key does not match")]
    assert reloader.fetch() is None
    assert reloader.material is good
    assert reloader.fetch() is None and fake.reads == 2  # not read again per handshake
    assert reloader.counts.failed == 1
    fixed = _material(b"fixed")
    fake.stamp, fake.outcomes = ((3, 1, 1),), [fixed]
    assert reloader.fetch() is fixed
    assert (reloader.counts.loaded, reloader.counts.failed) == (1, 1)


def test_files_that_cannot_be_stated_keep_the_last_good_pair() -> None:
    fake = FakeFiles()
    reloader = CertificateReloader(fake.read, fake.stamp_files)
    good = reloader.material

    def gone() -> Stamp:
        raise FileNotFoundError("tls.crt")

    reloader._stamp_files = gone
    assert reloader.fetch() is None and reloader.material is good
    assert reloader.fetch() is None and reloader.counts.failed == 1  # once, not per handshake
    back = _material(b"back")
    reloader._stamp_files, fake.outcomes = fake.stamp_files, [back]
    assert reloader.fetch() is back  # the files are back: read again


def test_a_broken_pair_at_startup_is_an_error_not_a_fallback() -> None:
    fake = FakeFiles()
    fake.outcomes = [TlsFileError("no PEM block")]
    with pytest.raises(TlsFileError):
        CertificateReloader(fake.read, fake.stamp_files)


# -- the real server -----------------------------------------------------------------------


@asynccontextmanager
async def serving(tls: EppTlsConfig | None) -> AsyncIterator[tuple[int, object]]:
    fleet = FakeFleet(FakeBackend("a"))
    app = create_app(make_config(), transport=fleet.transport, background=False)
    async with app.router.lifespan_context(app):
        server, port, _ = await start_picker(app.state.ctx, "127.0.0.1", 0, tls)
        try:
            yield port, app.state.ctx
        finally:
            await server.stop(grace=None)


def _tls(files: dict[str, Path], *, mutual: bool = False) -> EppTlsConfig:
    return EppTlsConfig(
        cert_file=str(files["cert_file"]),
        key_file=str(files["key_file"]),
        client_ca_file=str(files["client_ca_file"]) if mutual else None,
    )


async def _health(channel: grpc.aio.Channel) -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    reply = await stub.Check(health_pb2.HealthCheckRequest(service="liveness"), timeout=5)
    status: int = reply.status
    return status


def _secure(port: int, ca: TestCa, client: Issued | None = None) -> grpc.aio.Channel:
    creds = grpc.ssl_channel_credentials(
        root_certificates=ca.cert_pem,
        private_key=client.key_pem if client else None,
        certificate_chain=client.cert_pem if client else None,
    )
    options = [("grpc.ssl_target_name_override", SERVER_NAME)]
    return grpc.aio.secure_channel(f"127.0.0.1:{port}", creds, options=options)


def _peer_serial(port: int, ca: TestCa) -> int:
    """One new TLS handshake with Python's ssl: the serial of the certificate presented."""
    context = ssl.create_default_context(cadata=ca.cert_pem.decode())
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=SERVER_NAME) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def _replace(issued: Issued, files: dict[str, Path]) -> None:
    """As a Secret volume changes: new files swapped in (a new inode, a later mtime)."""
    for data, name in ((issued.cert_pem, "cert_file"), (issued.key_pem, "key_file")):
        target = files[name]
        staged = target.with_suffix(".new")
        staged.write_bytes(data)
        os.replace(staged, target)


async def test_a_tls_client_is_served_and_a_cleartext_one_refused(
    files: dict[str, Path], ca: TestCa
) -> None:
    async with serving(_tls(files)) as (port, _ctx):
        async with _secure(port, ca) as channel:
            assert await _health(channel) == health_pb2.HealthCheckResponse.SERVING
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await _health(channel)
            assert refused.value.code() is grpc.StatusCode.UNAVAILABLE


async def test_mutual_tls_refuses_a_client_without_a_certificate(
    files: dict[str, Path], ca: TestCa
) -> None:
    async with serving(_tls(files, mutual=True)) as (port, _ctx):
        async with _secure(port, ca, ca.issue("envoy", client=True)) as channel:
            assert await _health(channel) == health_pb2.HealthCheckResponse.SERVING
        async with _secure(port, ca) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await _health(channel)
            assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
        stranger = TestCa("another CA").issue("envoy", client=True)
        async with _secure(port, ca, stranger) as channel:
            with pytest.raises(grpc.aio.AioRpcError):
                await _health(channel)


async def test_replaced_files_are_presented_at_the_next_handshake_broken_ones_are_not(
    files: dict[str, Path], ca: TestCa
) -> None:
    first = x509.load_pem_x509_certificate(files["cert_file"].read_bytes()).serial_number
    async with serving(_tls(files)) as (port, ctx):
        assert await asyncio.to_thread(_peer_serial, port, ca) == first
        renewed = ca.issue("picker")
        _replace(renewed, files)
        assert await asyncio.to_thread(_peer_serial, port, ca) == renewed.serial
        files["key_file"].write_bytes(ca.issue("half written").key_pem)  # no longer a pair
        assert await asyncio.to_thread(_peer_serial, port, ca) == renewed.serial
        async with _secure(port, ca) as channel:  # and gRPC is still served over it
            assert await _health(channel) == health_pb2.HealthCheckResponse.SERVING
        exposition = ctx.metrics.exposition().decode()
        assert 'sluicegate_epp_tls_reloads_total{result="ok"} 1.0' in exposition
        assert 'sluicegate_epp_tls_reloads_total{result="error"} 1.0' in exposition
