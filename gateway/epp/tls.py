"""TLS on the picker's gRPC port, with certificates that rotate without a restart.

gRPC's dynamic server credentials ask ``CertificateReloader.fetch`` before every new
connection's handshake. It stats the files (cheap) and reads them again only when one
changed (mtime, size or inode: cert-manager's renewal swaps the Secret volume's files in
place). A new pair that reads and checks whole replaces the old one for new handshakes;
one that does not (a half-written file, a key that does not match the certificate yet) is
logged and counted, and the last good pair stays in service: never plaintext, never a
handshake with a broken pair. The same files are tried again once they change again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import grpc
from prometheus_client import CollectorRegistry, Counter

from gateway.config.schema import EppTlsConfig
from gateway.epp.tls_files import Stamp, TlsFileError, TlsMaterial, read_material, stamp

log = logging.getLogger("sluicegate.epp.tls")

_MISSING: Stamp = ()
"""The stamp while a file cannot be stat'ed (between a volume's swaps, or gone)."""
Reader = Callable[[], TlsMaterial]
Stamper = Callable[[], Stamp]


@dataclass
class ReloadCounts:
    """What happened to changed files: loaded, or refused (the last good pair kept)."""

    loaded: int = 0
    failed: int = 0


class CertificateReloader:
    """The current TLS material and the rule that replaces it. ``read`` and ``stamp_files``
    are injected (the files by default), so the rule is testable without files."""

    def __init__(self, read: Reader, stamp_files: Stamper, counter: Counter | None = None):
        self._read, self._stamp_files, self._counter = read, stamp_files, counter
        self.counts = ReloadCounts()
        self._seen = stamp_files()
        self.material = read()  # at startup a broken pair is an error, not a fallback

    def fetch(self) -> TlsMaterial | None:
        """New material when the files changed and read whole; None: keep the current."""
        try:
            now = self._stamp_files()
        except OSError as exc:
            if self._seen != _MISSING:
                self._refuse(_MISSING, f"cannot stat ({exc})")
            return None
        if now == self._seen:
            return None
        try:
            material = self._read()
        except TlsFileError as exc:
            self._refuse(now, str(exc))
            return None
        self._seen, self.material = now, material
        self.counts.loaded += 1
        self._count("ok")
        log.warning("epp tls: certificate files changed; new handshakes use them")
        return material

    def _refuse(self, now: Stamp, why: str) -> None:
        self._seen = now  # logged and counted once per change, not per handshake
        self.counts.failed += 1
        self._count("error")
        log.error("epp tls: certificate reload failed, the last good pair stays: %s", why)

    def _count(self, result: str) -> None:
        if self._counter is not None:
            self._counter.labels(result).inc()


def reload_counter(registry: CollectorRegistry) -> Counter:
    counter = Counter(
        "sluicegate_epp_tls_reloads",
        "Reloads of the picker's changed TLS files: ok (new handshakes use them) or error "
        "(refused; the last good certificate stays in service)",
        ["result"],
        registry=registry,
    )
    for result in ("ok", "error"):
        counter.labels(result)  # exported at 0, so increase() sees the first failure
    return counter


def file_reloader(settings: EppTlsConfig, counter: Counter | None) -> CertificateReloader:
    optional = (settings.client_ca_file,) if settings.client_ca_file is not None else ()
    paths = (settings.cert_file, settings.key_file, *optional)
    return CertificateReloader(
        lambda: read_material(settings.cert_file, settings.key_file, settings.client_ca_file),
        lambda: stamp(paths),
        counter,
    )


def _configuration(material: TlsMaterial) -> grpc.ServerCertificateConfiguration:
    return grpc.ssl_server_certificate_configuration(
        [(material.private_key, material.certificate_chain)],
        root_certificates=material.client_ca,
    )


def server_credentials(reloader: CertificateReloader) -> grpc.ServerCredentials:
    """Credentials that ask ``reloader`` before each handshake; with a client CA, every
    client must present a certificate that chains to it."""

    def fetch() -> grpc.ServerCertificateConfiguration | None:
        try:
            material = reloader.fetch()
            return None if material is None else _configuration(material)
        except Exception:  # a fetcher's error must not fail the handshake: keep the pair
            log.exception("epp tls: certificate check failed, the last good pair stays")
            return None

    return grpc.dynamic_ssl_server_credentials(
        _configuration(reloader.material),
        fetch,
        require_client_authentication=reloader.material.client_ca is not None,
    )
