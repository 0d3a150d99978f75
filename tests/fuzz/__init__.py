"""Property-based fuzzing of what clients and operators control: request bodies, headers
and paths against the real ASGI app in-process (a fake vLLM at the transport layer), and
config files through the loader and ``check-config``. The unit tier runs a short campaign
(tests/unit/gateway/test_fuzz.py); the long one is ``python -m tests.fuzz``."""
