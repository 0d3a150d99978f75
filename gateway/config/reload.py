"""Hot reload: validate and build a new config to the side, then swap one reference.

A bad file is counted (``sluicegate_config_reloads_total{result="error"}``) and logged
with every error located; the running config stays. Queued and in-flight requests live
in the scheduler, which ``swap`` keeps, so they survive. Restart-only settings
(``in_force.py``: backends, health, scrape, reload, most of server) are not swapped: the
config in force keeps the started ones, and each difference between the file and what is
in force is logged once, saying it applies at the next restart. The version advertised is
the hash of the config in force, so a reload that changes only restart-only settings, or
puts them back, changes nothing and swaps nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path

from gateway.config.in_force import in_force, pending_restart
from gateway.config.schema import (
    ConfigError,
    GatewayConfig,
    LoadedConfig,
    config_version,
    issues_at,
    load_config,
)
from policies.policy_set import PolicySet
from policies.registry import PolicyConfigError, build_policy

log = logging.getLogger("sluicegate.reload")


def build_loaded_policy(loaded: LoadedConfig) -> PolicySet:
    """The policy of a loaded config, versioned by the whole file's hash; errors located."""
    try:
        policy = build_policy(loaded.config.policy)
    except PolicyConfigError as exc:
        raise ConfigError(issues_at(loaded.source, loaded.lines, ("policy",), exc.errors)) from exc
    return dataclasses.replace(policy, version=loaded.version)


Apply = Callable[[LoadedConfig, PolicySet], None]


class Reloader:
    """Reloads ``path`` on demand (SIGHUP, ``reload()``) and when the file changes."""

    def __init__(
        self,
        path: str | Path,
        apply: Apply,
        *,
        in_force: LoadedConfig,
        on_result: Callable[[bool], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self._apply = apply
        self._started = in_force.config
        """The restart-only settings in force: those the process started with."""
        self._in_force = in_force
        self._pending: list[str] = []
        self._on_result = on_result
        self._stamp = _stamp(self.path)

    @property
    def version(self) -> str:
        return self._in_force.version

    def reload(self) -> bool:
        """True when the file is valid (applied, or unchanged); False keeps the old config."""
        try:
            file = load_config(self.path)
            loaded = _in_force(file, self._started)
            policy = build_loaded_policy(loaded)
        except ConfigError as exc:
            for issue in exc.issues:
                log.error("config reload rejected: %s", issue)
            self._report(False)
            return False
        self._note_pending(pending_restart(file.config, self._started))
        if loaded.version != self._in_force.version:
            self._apply(loaded, policy)
            log.warning("config reloaded: version %s -> %s", self.version, loaded.version)
            self._in_force = loaded
        self._report(True)
        return True

    def _note_pending(self, pending: list[str]) -> None:
        """Log the restart-only differences when they change (not on every reload)."""
        if pending == self._pending:
            return
        self._pending = pending
        if pending:
            log.warning("config: applies at the next restart, not now: %s", "; ".join(pending))
        else:
            log.warning("config: the restart-only settings in the file are those in force again")

    def _report(self, ok: bool) -> None:
        if self._on_result is not None:
            self._on_result(ok)

    async def watch(self, interval_s: float) -> None:
        """Poll the file's mtime and size; reload when they change."""
        while True:
            await asyncio.sleep(interval_s)
            stamp = _stamp(self.path)
            if stamp != self._stamp:
                self._stamp = stamp
                self.reload()

    def install_sighup(self, loop: asyncio.AbstractEventLoop) -> bool:
        """SIGHUP → reload; False where signals cannot be installed (not main thread)."""
        try:
            loop.add_signal_handler(signal.SIGHUP, self.reload)
        except (NotImplementedError, RuntimeError, ValueError):
            return False
        return True


def _in_force(file: LoadedConfig, started: GatewayConfig) -> LoadedConfig:
    """The file's hot settings over the started restart-only ones, versioned as such."""
    cfg = in_force(file.config, started)
    return dataclasses.replace(file, config=cfg, version=config_version(cfg))


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size
