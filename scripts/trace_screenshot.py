"""Render one real trace in Phoenix's UI and save it as a PNG (docs/trace-phoenix.png).

    python -m scripts.trace_screenshot [--out docs/trace-phoenix.png] [--emulator]

Starts a real Phoenix (scripts/phoenix/install.sh), a real tiny vLLM-CPU exporting its engine
spans to it (``--otlp-traces-endpoint``; ``--emulator``: two emulators instead, no engine
span), and the gateway with tracing on in front, sends one streamed chat with a
``traceparent``, waits until the trace is in Phoenix, prints its span tree as text, then opens
the trace in headless Debian Chromium (playwright's driver, ``/usr/bin/chromium``, never a
downloaded browser; ``apt-get install chromium`` and ``pip install playwright``) and takes
the screenshot. Not run by CI: the PNG is checked in.
"""

from __future__ import annotations

import argparse
import contextlib
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from scripts.vllm.serve import VllmServer, tracing_args, vllm_venv
from tests.phoenix_server import PhoenixServer, install_phoenix
from tests.phoenix_spans import PhoenixSpans, Trace
from tests.vllm.gateway_process import GatewayProcess
from tests.vllm.support import AGENTS_KEY, EXACT, PROMPT
from tests.vllm.support import gateway_config as vllm_gateway_config

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1440, "height": 860}


@contextlib.contextmanager
def tiny_vllm(phoenix: PhoenixServer) -> Iterator[dict[str, Any]]:
    """A tiny vLLM exporting to ``phoenix``; yields the gateway config in front of it."""
    subprocess.run(["bash", str(REPO / "scripts/vllm/install.sh")], check=True)
    built = subprocess.run(
        [str(vllm_venv() / "bin/python"), str(REPO / "scripts/vllm/build_model.py"), "tiny"],
        check=True,
        capture_output=True,
        text=True,
    )
    flag, env = tracing_args(phoenix.otlp_traces_url)
    model_dir = Path(built.stdout.strip().splitlines()[-1])
    server = VllmServer.start(model_dir, served_name="tiny", extra_args=flag, env=env)
    try:
        yield vllm_gateway_config([server])
    finally:
        server.stop()


@contextlib.contextmanager
def two_emulators() -> Iterator[dict[str, Any]]:
    from emulator.embedded import EmulatorSpec, start_emulators
    from tests.integration.harness import api_key, gateway_config

    specs = [EmulatorSpec(model_name="tiny", speed=10.0)] * 2
    with start_emulators(specs) as fleet:
        config = gateway_config(fleet.urls, {"ladder": {"steps": []}}, tenants=("agents",))
        for backend in config["backends"]:
            backend["models"] = ["tiny"]
        assert api_key("agents") == AGENTS_KEY
        yield config


def one_traced_call(gateway: GatewayProcess) -> str:
    """One streamed chat through ``gateway`` under a fresh trace id; that id."""
    trace_id = secrets.token_hex(16)
    body = {
        "model": "tiny",
        "messages": PROMPT,
        "max_tokens": 24,
        "stream": True,
        "stream_options": {"include_usage": True},
        **EXACT,
    }
    headers = {
        "authorization": f"Bearer {AGENTS_KEY}",
        "traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01",
    }
    with httpx.stream(
        "POST", f"{gateway.url}/v1/chat/completions", json=body, headers=headers, timeout=120.0
    ) as reply:
        reply.raise_for_status()
        for _ in reply.iter_lines():
            pass
    return trace_id


def screenshot(phoenix: PhoenixServer, trace: Trace, trace_id: str, out: Path) -> None:
    from playwright.sync_api import sync_playwright

    deepest = "llm_request" if trace.named("llm_request") else "stream"
    with (
        tempfile.TemporaryDirectory(prefix="sluicegate-chromium-") as profile,
        sync_playwright() as p,
    ):
        browser = p.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            args=CHROMIUM_FLAGS,
            headless=True,
            viewport=VIEWPORT,
        )
        try:
            page = browser.pages[0] if browser.pages else browser.new_page()
            page.goto(f"{phoenix.url}/redirects/traces/{trace_id}", wait_until="networkidle")
            page.get_by_text(deepest, exact=True).first.wait_for(timeout=60_000)
            # the decision's span selected: its attributes fill the pane beside the tree
            page.get_by_text("decide", exact=True).first.click()
            page.get_by_role("tab", name="Attributes").click()
            page.get_by_text("capacity_available").first.wait_for(timeout=60_000)
            page.wait_for_load_state("networkidle")
            page.screenshot(path=str(out))
        finally:
            browser.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "trace-phoenix.png")
    parser.add_argument("--emulator", action="store_true", help="two emulators, no vLLM")
    args = parser.parse_args(argv)
    install_phoenix()
    phoenix = PhoenixServer().start()
    try:
        backends = two_emulators() if args.emulator else tiny_vllm(phoenix)
        with backends as config, tempfile.TemporaryDirectory() as workdir:
            tracing = {"enabled": True, "sample_ratio": 1.0, "endpoint": phoenix.otlp_traces_url}
            gateway = GatewayProcess.start({**config, "tracing": tracing}, Path(workdir))
            try:
                trace_id = one_traced_call(gateway)
            finally:
                gateway.stop()  # flushes the gateway's spans
        names = {"chat tiny", "stream"} | (set() if args.emulator else {"llm_request"})
        trace = PhoenixSpans(phoenix.url).wait_for_spans(trace_id, names)
        print(f"trace {trace_id}:\n{trace.tree()}")
        screenshot(phoenix, trace, trace_id, args.out)
        print(f"{args.out}: {args.out.stat().st_size // 1024} KB")
    finally:
        phoenix.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
