"""Lingering close on ``sluicegate serve`` (uvicorn, httptools, uvloop) as a process: a client
that sends a body over ``max_body_bytes`` reads the 413, whether it writes its whole body
before reading (``urllib``, a raw socket that keeps writing) or trickles it forever; and
the drain of the rest of the body ends at its bounds (time, bytes), which the tests see as
the gateway closing the connection (the client's next writes fail), not as a duration.

Closing at once with the body unread resets the connection: ``urllib`` then fails with
``BrokenPipeError`` or ``ECONNRESET`` about one time in four, and a kept-alive client that
trickles its body holds the connection for as long as it likes."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from emulator.embedded import EmulatorSpec, start_emulator
from scripts.vllm.serve import free_port
from tests.integration.harness import api_key, chat_body, chat_head, cli_process, gateway_config

pytestmark = pytest.mark.emulator

LIMIT = 1_048_576
"""``max_body_bytes`` (the default)."""
LINGER_TIME_S = 5.0
LINGER_MAX_BYTES = 4 * 2**20
TRICKLE_GAP_S = 0.05
ATTEMPTS = 12
"""``urllib`` posts: with the connection closed at once, most runs see a reset in a dozen."""


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A gateway process with a short drain (5 s in all, 4 MiB; 60 s idle, so only the
    total and byte bounds can end a draining client that keeps writing)."""
    emu = start_emulator(EmulatorSpec(profile="rx9070xt", model_name="emulated", speed=20.0))
    try:
        port = free_port()
        raw = gateway_config([emu.url], {})
        raw["server"].update(
            port=port,
            max_body_bytes=LIMIT,
            lingering_time_s=LINGER_TIME_S,
            lingering_timeout_s=60.0,
            lingering_max_bytes=LINGER_MAX_BYTES,
        )
        path = Path(tmp_path_factory.mktemp("linger")) / "sluicegate.yaml"
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        with cli_process("serve", "--config", str(path), "--no-records", "--log-level", "warning"):
            _wait_listening(port)
            yield port
    finally:
        emu.stop()


def _wait_listening(port: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError("the gateway did not start")


def _big_body(size: int) -> bytes:
    return json.dumps(chat_body(8, content="x" * size)).encode()


def test_urllib_sending_2mb_reads_the_413(port: int) -> None:
    body = _big_body(2_000_000)
    for _ in range(ATTEMPTS):
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            data=body,
            headers={
                "authorization": f"Bearer {api_key('alice')}",
                "content-type": "application/json",
            },
        )
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(request, timeout=60)
        assert answer.value.code == 413
        assert json.loads(answer.value.read())["error"]["code"] == "request_too_large"


@pytest.mark.parametrize("close", [True, False], ids=["connection-close", "keep-alive"])
def test_a_raw_socket_that_keeps_writing_reads_the_413(port: int, close: bool) -> None:
    body = b"x" * 2_000_000
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(chat_head(port, len(body), **({"connection": "close"} if close else {})))
        for i in range(0, len(body), 65_536):
            sock.sendall(body[i : i + 65_536])  # the whole body, whatever came back meanwhile
        answer = _read_to_end(sock)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert b"connection: close" in answer.lower()
    assert b'"code":"request_too_large"' in answer


def test_a_slowloris_body_is_drained_until_the_time_bound_then_closed(port: int) -> None:
    """One byte every 50 ms (the idle bound is 60 s): only the 5 s bound can end it."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(chat_head(port, 10 * LIMIT) + b"x" * 1024)
        assert _read_answer(sock).startswith(b"HTTP/1.1 413 ")
        cap = int(20 * LINGER_TIME_S / TRICKLE_GAP_S)
        sent = _write_until_closed(sock, b"x", cap, TRICKLE_GAP_S)
    assert sent < cap, f"the gateway still read the trickle after {cap} writes"


def test_a_fast_body_is_drained_until_the_byte_bound_then_closed(port: int) -> None:
    declared = 64 * 2**20
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(chat_head(port, declared) + b"x" * 1024)
        assert _read_answer(sock).startswith(b"HTTP/1.1 413 ")
        chunk = b"x" * 65_536
        sent = _write_until_closed(sock, chunk, declared // len(chunk), 0.0)
    assert sent * len(chunk) < declared, "the gateway drained the whole 64 MiB"
    assert sent * len(chunk) >= LINGER_MAX_BYTES - 2048, "closed before the byte bound"


def test_the_gateway_still_serves_after_draining(port: int) -> None:
    r = httpx.post(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        json=chat_body(4),
        headers={"authorization": f"Bearer {api_key('alice')}"},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert "close" not in r.headers.get("connection", "")


def _read_answer(sock: socket.socket) -> bytes:
    """The whole 413 (headers and its small JSON body) as it comes, without reading to EOF."""
    data = b""
    while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}}"):
        chunk = sock.recv(65_536)
        assert chunk, f"closed before the whole answer: {data[:200]!r}"
        data += chunk
    return data


def _read_to_end(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65_536):
        data += chunk
    return data


def _write_until_closed(sock: socket.socket, chunk: bytes, cap: int, gap_s: float) -> int:
    """Write ``chunk`` up to ``cap`` times, ``gap_s`` apart; the number written before a
    write failed because the gateway closed the connection (``cap``: it never did)."""
    for n in range(cap):
        try:
            sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            return n
        if gap_s:
            time.sleep(gap_s)  # pace the trickle
    return cap
