"""The emulator's own HTTP tests use the integration tier's emulator fixtures."""

from tests.integration.conftest import emulator, start_emulator

__all__ = ["emulator", "start_emulator"]
