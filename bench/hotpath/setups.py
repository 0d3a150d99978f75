"""The four setups measured side by side, all in front of the same fake backend.

Each setup starts its proxy pinned to the proxy core and gives the URL the load generator
hits. ``direct`` has no proxy: wrk talks to the backend itself.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from string import Template

from bench.hotpath.procs import REPO, Proc, wait_http
from scripts.vllm.serve import free_port

HERE = Path(__file__).resolve().parent
LITELLM_VENV = Path(
    os.environ.get("SLUICEGATE_LITELLM_VENV", Path.home() / ".cache/sluicegate/litellm-venv")
)
MODEL = "fake"
TENANT_KEYS = tuple(f"bench-key-{i}" for i in range(4))
"""One API key per tenant of the Sluicegate config; wrk rotates over them."""


@dataclass
class Setup:
    """A proxy (or none) in front of the backend at ``backend_port``."""

    name: str
    backend_port: int
    port: int
    workdir: Path
    proxy_cpus: str = "1"
    keys: tuple[str, ...] = TENANT_KEYS
    """API keys the load generator rotates over (ignored where the setup has no auth)."""
    procs: list[Proc] = field(default_factory=list)

    def __post_init__(self) -> None:
        """Hook for subclasses (the dataclass __init__ calls it)."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/chat/completions"

    def start(self) -> None:
        """Start the proxy and wait until it answers."""

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()

    def version(self) -> str:
        return "-"

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.alive()]


class Direct(Setup):
    def __init__(self, backend_port: int, workdir: Path) -> None:
        super().__init__("direct", backend_port, backend_port, workdir)

    def version(self) -> str:
        return "fake backend (raw asyncio protocol on uvloop)"


class Nginx(Setup):
    """nginx from Debian, one worker, keep-alive upstream, ``proxy_buffering off``."""

    def start(self) -> None:
        root = self.workdir / "nginx"
        (root / "logs").mkdir(parents=True, exist_ok=True)
        conf = Template((HERE / "nginx.conf.tmpl").read_text()).substitute(
            root=root, port=self.port, backend_port=self.backend_port
        )
        (root / "nginx.conf").write_text(conf)
        nginx = Proc(
            "nginx",
            ["nginx", "-p", str(root), "-c", str(root / "nginx.conf")],
            self.proxy_cpus,
            self.workdir / "nginx.log",
        )
        self.procs.append(nginx)
        nginx.start()
        wait_http(nginx, "127.0.0.1", self.port)

    def version(self) -> str:
        out = subprocess.run(["nginx", "-v"], capture_output=True, text=True)
        return out.stderr.strip().removeprefix("nginx version: ")


class LiteLLM(Setup):
    """LiteLLM proxy from its own venv: one worker, no database, callbacks and telemetry off.

    It refuses to start without a master key, so it gets one, and the load generator sends it.
    """

    master_key = "sk-bench-litellm-master-key"

    def __post_init__(self) -> None:
        self.keys = (self.master_key,)

    def start(self) -> None:
        exe = LITELLM_VENV / "bin" / "litellm"
        if not exe.exists():
            raise RuntimeError(
                f"no LiteLLM at {exe}: python -m venv {LITELLM_VENV} && "
                f"{LITELLM_VENV}/bin/pip install 'litellm[proxy]'"
            )
        conf = Template((HERE / "litellm.yaml.tmpl").read_text()).substitute(
            model=MODEL, backend_port=self.backend_port
        )
        path = self.workdir / "litellm.yaml"
        path.write_text(conf)
        env = {
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no network fetch of the price list
            "LITELLM_TELEMETRY": "False",
            "LITELLM_LOG": "ERROR",
            "PYTHONPATH": "",
            "LITELLM_MASTER_KEY": self.master_key,
        }
        argv = [
            str(exe),
            "--config",
            str(path),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--num_workers",
            "1",
        ]
        proc = Proc("litellm", argv, self.proxy_cpus, self.workdir / "litellm.log", env)
        self.procs.append(proc)
        proc.start()
        wait_http(proc, "127.0.0.1", self.port, "/health/liveliness", timeout_s=120)

    def version(self) -> str:
        pip = LITELLM_VENV / "bin" / "pip"
        out = subprocess.run([str(pip), "show", "litellm"], capture_output=True, text=True)
        for line in out.stdout.splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
        return "?"


class Sluicegate(Setup):
    """``sluicegate serve`` with the realistic policy config in ``sluicegate.yaml.tmpl``."""

    max_num_seqs = 512
    max_concurrent_per_tenant = 1024

    def start(self) -> None:
        digests = [hashlib.sha256(k.encode()).hexdigest() for k in TENANT_KEYS]
        conf = Template((HERE / "sluicegate.yaml.tmpl").read_text()).substitute(
            {f"digest{i}": d for i, d in enumerate(digests)}
            | {
                "port": self.port,
                "backend_port": self.backend_port,
                "model": MODEL,
                "max_num_seqs": self.max_num_seqs,
                "max_concurrent": self.max_concurrent_per_tenant,
            }
        )
        path = self.workdir / f"{self.name}.yaml"
        path.write_text(conf + self.extra_config())
        argv, env = self.command(path)
        proc = Proc(self.name, argv, self.proxy_cpus, self.workdir / f"{self.name}.log", env)
        self.procs.append(proc)
        proc.start()
        wait_http(proc, "127.0.0.1", self.port, "/healthz", timeout_s=60)

    def extra_config(self) -> str:
        """YAML appended to the template's (a section it does not set)."""
        return ""

    def command(self, config: Path) -> tuple[list[str], dict[str, str]]:
        return [shutil.which("sluicegate") or "sluicegate", "serve", "--config", str(config)], {}

    def version(self) -> str:
        rev = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "gateway"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        return f"git {rev}{' + uncommitted gateway changes' if dirty else ''}"


class SluicegateBaseline(Sluicegate):
    """The same ``serve`` from another checkout (``SLUICEGATE_BASELINE``, e.g. a worktree of
    an earlier commit), so a change is measured against what it replaces in one run."""

    def command(self, config: Path) -> tuple[list[str], dict[str, str]]:
        base = Path(os.environ["SLUICEGATE_BASELINE"]).resolve()
        module = "commands.cli" if (base / "commands" / "cli.py").exists() else "gateway.cli"
        run = "import runpy, sys; sys.argv[0] = 'sluicegate'; runpy.run_module(sys.argv.pop(1), "
        run += "run_name='__main__')"
        argv = [sys.executable, "-P", "-c", run, module, "serve", "--config", str(config)]
        return argv, {"PYTHONPATH": str(base)}

    def version(self) -> str:
        base = os.environ["SLUICEGATE_BASELINE"]
        rev = subprocess.run(
            ["git", "-C", base, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        return f"baseline git {rev} ({base})"


class SluicegateTraced(Sluicegate):
    """The same ``serve`` with tracing on at ratio 1.0: every request's spans batched and
    exported over OTLP/HTTP to a sink that discards them (``otlp_sink.py``, on the cores
    that are not the proxy's, its CPU not counted). Beside ``sluicegate`` it prints the
    CPU per request that tracing adds."""

    sink: Proc | None = None
    endpoint = ""
    """The sink's traces URL, once started."""

    def start(self) -> None:
        sink_port = free_port()
        cores = sorted(os.sched_getaffinity(0) - _cores(self.proxy_cpus)) or [0]
        argv = [sys.executable, "-m", "bench.hotpath.otlp_sink", "--port", str(sink_port)]
        self.sink = Proc("otlp-sink", argv, ",".join(map(str, cores)), self.workdir / "sink.log")
        self.sink.start()
        wait_http(self.sink, "127.0.0.1", sink_port, "/")
        self.endpoint = f"http://127.0.0.1:{sink_port}/v1/traces"
        super().start()

    def extra_config(self) -> str:
        return f"tracing:\n  enabled: true\n  sample_ratio: 1.0\n  endpoint: {self.endpoint}\n"

    def stop(self) -> None:
        super().stop()
        if self.sink is not None:
            self.sink.stop()

    def version(self) -> str:
        return f"{super().version()}, tracing on (ratio 1.0, OTLP/HTTP to a discarding sink)"


def _cores(cpus: str) -> set[int]:
    """The cores of a taskset list such as ``"1"`` or ``"2-3,5"``."""
    out: set[int] = set()
    for part in cpus.split(","):
        first, _, last = part.partition("-")
        out.update(range(int(first), int(last or first) + 1))
    return out


class Naive(Setup):
    """FastAPI + httpx pass-through (``naive_proxy.py``): no decisions, a calibration point."""

    def start(self) -> None:
        argv = [
            sys.executable,
            "-m",
            "uvicorn",
            "bench.hotpath.naive_proxy:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--loop",
            "uvloop",
            "--http",
            "httptools",
            "--no-access-log",
            "--log-level",
            "warning",
        ]
        env = {
            "NAIVE_UPSTREAM": f"http://127.0.0.1:{self.backend_port}",
            "NAIVE_CLIENT": "pool" if self.name == "naive-pool" else "httpx",
        }
        proc = Proc(self.name, argv, self.proxy_cpus, self.workdir / "naive.log", env)
        self.procs.append(proc)
        proc.start()
        wait_http(proc, "127.0.0.1", self.port)

    def version(self) -> str:
        pool = "gateway.forward.connection_pool.UpstreamPool"
        client = pool if self.name == "naive-pool" else "httpx"
        return f"FastAPI + {client}, uvicorn (httptools, uvloop)"


SETUP_CLASSES: dict[str, type[Setup]] = {
    "nginx": Nginx,
    "litellm": LiteLLM,
    "sluicegate": Sluicegate,
    "sluicegate-baseline": SluicegateBaseline,
    "sluicegate-traced": SluicegateTraced,
    "naive": Naive,
    "naive-pool": Naive,
}
