"""An OTLP/HTTP receiver that accepts every export and keeps nothing: the other end of the
traced Sluicegate setup, so the benchmark measures the gateway's cost of tracing (spans
built, batched, encoded and sent) and not a collector's.

``python -m bench.hotpath.otlp_sink --port N``: ``POST /v1/traces`` answers 200 with an
empty ``ExportTraceServiceResponse``; ``GET /`` answers 200 (readiness).
"""

from __future__ import annotations

import argparse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # the exporter keeps its connection

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))  # read, then dropped
        self._empty(200, "application/x-protobuf")

    def do_GET(self) -> None:
        self._empty(200, "text/plain")

    def _empty(self, status: int, kind: str) -> None:
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args()
    ThreadingHTTPServer(("127.0.0.1", args.port), _Sink).serve_forever()


if __name__ == "__main__":
    main()
