"""A small loopback site for the scheduler's edge cases: retries, redirects, 404s, a changing page."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class EdgeSite:
    """``/page/N`` (stable; its title carries ``version``), ``/flaky/N`` (503 on the first hit),
    ``/redirect/N`` (301 to ``/page/N``), ``/gone/N`` (404), ``/error/N`` (500), ``/sometimes/N``
    (404 while ``missing``, else a page), ``/private/N`` (a page that ``/robots.txt`` disallows) and
    ``/api?url=PATH`` (PATH's answer, as a scraping API relays it). Loopback only. *page_headers* go
    out with every ``/page`` and ``/flaky`` answer."""

    def __init__(self) -> None:
        self.version = 0
        self.missing = False
        self.page_headers: dict[str, str] = {}
        self.hits: dict[str, int] = {}
        self._lock = threading.Lock()
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with site._lock:
                    site.hits[self.path] = site.hits.get(self.path, 0) + 1
                    hits = site.hits[self.path]
                path = self.path.removeprefix("/api?url=")
                kind, _, number = path.strip("/").partition("/")
                if kind == "robots.txt":
                    self._send(200, b"User-agent: *\nDisallow: /private/\n", {"Content-Type": "text/plain"})
                elif kind == "error" or (kind == "sometimes" and site.missing):
                    self._send(500 if kind == "error" else 404, b"no")
                elif kind == "redirect":
                    self._send(301, b"", {"Location": f"/page/{number}"})
                elif kind == "flaky" and hits == 1:
                    self._send(503, b"busy")
                elif kind in ("page", "flaky", "sometimes", "private"):
                    body = f"<html><h1>{kind} {number} v{site.version}</h1></html>".encode()
                    self._send(200, body, {"Content-Type": "text/html", **site.page_headers})
                else:
                    self._send(404, b"gone")

            def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
