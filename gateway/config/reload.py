"""Hot reload: validate and build a new config to the side, then swap one reference.

A bad file is counted (``sluicegate_config_reloads_total{result="error"}``) and logged
with every error located; the running config stays. Queued and in-flight requests live
in the scheduler, which ``swap`` keeps, so they survive. Backends are not hot-swapped:
a changed backend list is logged and applies at the next restart.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path

from gateway.config.schema import ConfigError, LoadedConfig, issues_at, load_config
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
        current_version: str,
        on_result: Callable[[bool], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self._apply = apply
        self._version = current_version
        self._on_result = on_result
        self._stamp = _stamp(self.path)

    @property
    def version(self) -> str:
        return self._version

    def reload(self) -> bool:
        """True when the file is valid (applied, or unchanged); False keeps the old config."""
        try:
            loaded = load_config(self.path)
            policy = build_loaded_policy(loaded)
        except ConfigError as exc:
            for issue in exc.issues:
                log.error("config reload rejected: %s", issue)
            self._report(False)
            return False
        if loaded.version != self._version:
            self._apply(loaded, policy)
            log.warning("config reloaded: version %s -> %s", self._version, loaded.version)
            self._version = loaded.version
        self._report(True)
        return True

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


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size
