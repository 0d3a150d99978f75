"""The processes of the Prometheus tier: emulators, the gateway and Prometheus itself, each a
child process on a loopback port, and the Prometheus config built from ``deploy/prometheus/``.

Ports are found by binding port 0 and closing it before the child binds it again: a child
that lost the port to another process exits, and ``wait_http`` reports that at once.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from scripts.child_process import passing, stop
from scripts.service_argv import NotReady, poll_ready
from scripts.vllm.serve import free_port

REPO = Path(__file__).resolve().parents[2]
DEPLOY_PROMETHEUS = REPO / "deploy" / "prometheus"
START_TIMEOUT_S = 30.0


def wait_http(proc: subprocess.Popen[bytes], url: str, timeout_s: float = START_TIMEOUT_S) -> None:
    """Poll ``url`` until it answers 200; fail at once when ``proc`` exits."""
    try:
        poll_ready(url, timeout_s, proc, every_s=0.05)
    except NotReady as not_ready:
        raise AssertionError(f"{proc.args!r}: {not_ready}") from None


@contextlib.contextmanager
def child(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` as a child process writing to ``log``; at exit SIGTERM, SIGKILL after 10 s."""
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            stop(proc)


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        raise AssertionError("no `prometheus` on PATH: scripts/test.sh installs it (apt)")
    return found


def shipped_rules(for_override: str) -> dict[str, Any]:
    """``alerts.yaml`` as shipped, with every ``for:`` shortened to ``for_override`` so the
    test sees pending turn into firing in seconds (expressions untouched)."""
    rules: dict[str, Any] = yaml.safe_load((DEPLOY_PROMETHEUS / "alerts.yaml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = for_override
    return rules


def shipped_scrape_config(
    targets: dict[str, list[str]], interval: str, rule_file: str
) -> dict[str, Any]:
    """``scrape.yaml`` as shipped, with each job's targets replaced and its interval (and
    timeout) shortened to ``interval``; rules evaluated at the same interval."""
    config: dict[str, Any] = yaml.safe_load((DEPLOY_PROMETHEUS / "scrape.yaml").read_text())
    for job in config["scrape_configs"]:
        job["scrape_interval"] = interval
        job["scrape_timeout"] = interval
        for static in job["static_configs"]:
            static["targets"] = targets[job["job_name"]]
    config["global"] = {"evaluation_interval": interval}
    config["rule_files"] = [rule_file]
    return config


@contextlib.contextmanager
def run_prometheus(
    workdir: Path, targets: dict[str, list[str]], interval: str, for_override: str
) -> Iterator[str]:
    """Prometheus on a free loopback port with the shipped config; yields its base URL."""
    (workdir / "alerts.yaml").write_text(yaml.safe_dump(shipped_rules(for_override)))
    config = shipped_scrape_config(targets, interval, "alerts.yaml")
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    passing(["promtool", "check", "config", str(workdir / "prometheus.yml")])
    port = free_port()
    argv = [
        prometheus_binary(),
        f"--config.file={workdir / 'prometheus.yml'}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    with child(argv, workdir / "prometheus.log") as proc:
        url = f"http://127.0.0.1:{port}"
        wait_http(proc, f"{url}/-/ready")
        yield url
