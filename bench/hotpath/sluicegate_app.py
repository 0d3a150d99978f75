"""Serve the gateway for the benchmark when ``sluicegate serve`` is not available yet.

``uvicorn --factory bench.hotpath.sluicegate_app:build`` with ``SLUICEGATE_CONFIG`` set:
the same ``create_app`` the CLI wires, with the config file watched for reload.
"""

from __future__ import annotations

import logging
import os

from fastapi import FastAPI

from gateway.app import create_app
from gateway.config import load_config


def build() -> FastAPI:
    path = os.environ["SLUICEGATE_CONFIG"]
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    return create_app(load_config(path), config_path=path)
