"""A booting vLLM server is reported while it boots (``on_wait``), not only once healthy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from scripts.vllm import serve


class _Booting:
    """Stands in for the server process: alive throughout."""

    returncode = None

    def poll(self) -> None:
        return None


def test_wait_healthy_reports_while_the_server_boots(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    answers = iter([503, 503, 503, 200])
    monkeypatch.setattr(serve, "WAIT_REPORT_S", 0.0)
    monkeypatch.setattr(serve.time, "sleep", lambda _s: None)
    monkeypatch.setattr(serve.httpx, "get", lambda *_a, **_k: httpx.Response(next(answers)))
    server = serve.VllmServer(_Booting(), "http://127.0.0.1:1", "tiny", tmp_path / "log")  # type: ignore[arg-type]
    waited: list[Any] = []
    server.wait_healthy(60.0, waited.append)
    assert len(waited) == 4 and waited == sorted(waited)
