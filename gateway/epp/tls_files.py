"""The picker's TLS files: a certificate chain and its key (PEM), and optionally the CA
bundle client certificates must chain to. Read and checked with the standard library's
``ssl`` (no gRPC, no third-party parser), so the config loader can check them too."""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from pathlib import Path


class TlsFileError(ValueError):
    """A TLS file is missing, unreadable, not PEM, or the key does not match the certificate."""


@dataclass(frozen=True)
class TlsMaterial:
    """The bytes gRPC's server credentials take, already checked."""

    certificate_chain: bytes
    private_key: bytes
    client_ca: bytes | None


Stamp = tuple[tuple[int, int, int], ...]
"""Per file (mtime ns, size, inode): what changes when a file is rewritten or replaced."""


def stamp(paths: tuple[str, ...]) -> Stamp:
    """The files' stamps; an OSError if one cannot be stat'ed."""
    out = []
    for path in paths:
        st = os.stat(path)
        out.append((st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(out)


def read_material(cert_file: str, key_file: str, client_ca_file: str | None) -> TlsMaterial:
    """The three files read and checked: the certificate chain and key parse as PEM and
    belong together, the CA bundle parses. Raises ``TlsFileError`` saying which file."""
    material = _read_all(cert_file, key_file, client_ca_file)
    check_material(cert_file, key_file, client_ca_file)
    if _read_all(cert_file, key_file, client_ca_file) != material:
        raise TlsFileError(f"cert_file {cert_file}: changed while being read")
    return material


def _read_all(cert_file: str, key_file: str, client_ca_file: str | None) -> TlsMaterial:
    cert = _read(cert_file, "cert_file")
    key = _read(key_file, "key_file")
    ca = _read(client_ca_file, "client_ca_file") if client_ca_file is not None else None
    return TlsMaterial(cert, key, ca)


def check_material(cert_file: str, key_file: str, client_ca_file: str | None) -> None:
    """The checks ``read_material`` makes, on the files as they are now."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    for name, path in (("cert_file", cert_file), ("key_file", key_file)):
        if b"-----BEGIN " not in _read(path, name):
            raise TlsFileError(f"{name} {path}: no PEM block")
    try:
        context.load_cert_chain(cert_file, key_file)
    except (ssl.SSLError, OSError) as exc:
        raise TlsFileError(
            f"cert_file {cert_file} and key_file {key_file}: not a PEM certificate chain "
            f"and its private key ({exc})"
        ) from exc
    if client_ca_file is not None:
        try:
            context.load_verify_locations(cafile=client_ca_file)
        except (ssl.SSLError, OSError) as exc:
            raise TlsFileError(
                f"client_ca_file {client_ca_file}: not PEM CA certificates ({exc})"
            ) from exc


def _read(path: str, name: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TlsFileError(f"{name} {path}: cannot read ({exc.strerror or exc})") from exc
