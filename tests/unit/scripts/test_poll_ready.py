"""``poll_ready``: a starting service is asked until it answers 200, and given up on at once
when its process exits; ``wait_ready`` words either failure with the tail of the log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from scripts import service_argv
from scripts.service_argv import NotReady, poll_ready, wait_ready


class _Process:
    """Stands in for the service's process: alive for ``alive`` polls, then exited with 3."""

    def __init__(self, alive: int) -> None:
        self.alive = alive
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.alive == 0:
            self.returncode = 3
        self.alive -= 1
        return self.returncode


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int | None]]:
    """The statuses the URL answers in turn (None: the connection is refused)."""
    statuses: list[int | None] = []

    def get(url: str, timeout: float) -> httpx.Response:
        status = statuses.pop(0)
        if status is None:
            raise httpx.ConnectError("refused")
        return httpx.Response(status)

    monkeypatch.setattr(service_argv.httpx, "get", get)
    monkeypatch.setattr(service_argv.time, "sleep", lambda _s: None)
    yield statuses


def test_asks_until_the_url_answers_200(answers: list[int | None]) -> None:
    answers.extend([None, 503, 200, 500])
    poll_ready("http://127.0.0.1:1/readyz", 60.0, _Process(alive=10))  # type: ignore[arg-type]
    assert answers == [500]


def test_an_exited_process_is_given_up_on_at_once(answers: list[int | None]) -> None:
    answers.extend([None, None, 200])
    with pytest.raises(NotReady, match="exited with 3") as raised:
        poll_ready("http://127.0.0.1:1/readyz", 60.0, _Process(alive=2))  # type: ignore[arg-type]
    assert raised.value.exited == 3
    assert answers == [200]


def test_no_time_left_is_not_ready(answers: list[int | None]) -> None:
    with pytest.raises(NotReady, match="did not answer 200 within 0") as raised:
        poll_ready("http://127.0.0.1:1/readyz", 0.0)
    assert raised.value.exited is None


def test_wait_ready_says_which_failure_with_the_log_tail(
    answers: list[int | None], tmp_path: Path
) -> None:
    log = tmp_path / "service.log"
    log.write_text("x" * 5000 + "the last words")
    answers.append(None)
    tail = log.read_text()[-3000:]
    with pytest.raises(RuntimeError) as exited:
        wait_ready(_Process(alive=1), "http://127.0.0.1:1/", log, 60.0, "svc")  # type: ignore[arg-type]
    assert str(exited.value) == f"svc exited early:\n{tail}"
    with pytest.raises(TimeoutError) as late:
        wait_ready(_Process(alive=1), "http://127.0.0.1:1/", log, 0.0, "svc")  # type: ignore[arg-type]
    assert str(late.value) == f"svc not ready at http://127.0.0.1:1/:\n{tail}"
