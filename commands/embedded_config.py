"""The config of a gateway in front of embedded emulators (``sluicegate serve`` with no config
file, ``sluicegate demo``): an anonymous tenant and a ``demo`` tenant with a known API key,
every emulator a backend serving the one model."""

from __future__ import annotations

import json

from gateway.config.schema import GatewayConfig, LoadedConfig, load_config_bytes
from gateway.request.auth import key_digest

DEMO_KEY = "sk-sluicegate-demo"
MODEL = "emulated"


def embedded_config(urls: list[str], source: str) -> LoadedConfig:
    """The gateway's config for the emulators at ``urls``; ``source`` names it in errors."""
    raw = {
        "tenants": [
            {"name": "anonymous"},
            {"name": "demo", "api_key_sha256": [key_digest(DEMO_KEY)]},
        ],
        "auth": {"anonymous_tenant": "anonymous"},
        "backends": [
            {"name": f"emulator-{i}", "url": url, "models": [MODEL]} for i, url in enumerate(urls)
        ],
    }
    cfg = GatewayConfig.model_validate(raw)
    return load_config_bytes(json.dumps(cfg.model_dump(mode="json")).encode(), source)
