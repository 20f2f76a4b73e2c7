"""Small loopback sites: the scheduler's edge cases (retries, redirects, 404s, a changing page), a
forward proxy, and a host that throttles."""

from __future__ import annotations

import gzip
import http.client
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


class _Server(ThreadingHTTPServer):
    # A crawl opens up to CONCURRENT_REQUESTS connections at once; with the default backlog of 5 the
    # kernel drops the rest, and the client's SYN is retried a second later.
    request_queue_size = 64


class _Handler(BaseHTTPRequestHandler):
    """A handler that answers with a body of known length and logs nothing."""

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class _LoopbackServer:
    """A threaded HTTP server on 127.0.0.1 and a free port, serving on a daemon thread."""

    def _serve(self, handler: type[BaseHTTPRequestHandler], address: str = "127.0.0.1") -> None:
        self.server = _Server((address, 0), handler)
        self.server.daemon_threads = True
        self.url = f"http://{address}:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class EdgeSite(_LoopbackServer):
    """``/page/N`` (stable; its title carries ``version``), ``/flaky/N`` (503 on the first hit),
    ``/redirect/N`` (301 to ``/page/N``), ``/refresh/N`` and ``/interstitial/N`` (a meta refresh to ``/page/N`` at
    once and after 30 s), ``/gone/N`` (404), ``/removed/N`` (410), ``/error/N`` (500),
    ``/sometimes/N`` (404 while ``missing``, else a page), ``/private/N`` (a page that ``/robots.txt``, fresh for a day,
    disallows), ``/sized/N`` (a page of N hundred bytes and a few) and ``/api?url=PATH`` (PATH's answer,
    as a scraping API relays it); members only, ``/members/N`` (a page, for a session cookie a ``POST /login``
    with the one-time token of a ``/login`` form sets, else a redirect to ``/login?next=...``) and
    ``/welcome``, where a log-in redirects (``POST /login`` counts in *hits*). Loopback only. *page_headers* go out with every ``/page`` and ``/flaky``
    answer. With *validators* pages carry an ETag and honour ``If-None-Match``; *flaky_odd* makes
    ``/flaky`` answer 503 to every odd hit; *moved* maps paths to the targets of redirects with status
    *moved_status* (301); paths in *sold* answer 200 with a notice that the listing is no longer available;
    *gzip* compresses bodies for clients that accept it. *requests* keeps each hit's
    conditional headers, *cookies* its ``Cookie`` header; *body_bytes* counts the body bytes written."""

    def __init__(self) -> None:
        self.version = 0
        self.missing = False
        self.page_headers: dict[str, str] = {}
        self.hits: dict[str, int] = {}
        self.validators = False
        self.flaky_odd = False
        self.moved: dict[str, str] = {}
        self.moved_status = 301
        self.sold: set[str] = set()
        self.gzip = False
        self.requests: list[tuple[str, str | None]] = []  # path, If-None-Match
        self.cookies: list[tuple[str, str | None]] = []  # path, Cookie
        self.body_bytes = 0
        self.tokens: set[str] = set()  # log-in form tokens given out and not used yet
        self.sessions: set[str] = set()
        self._lock = threading.Lock()
        site = self

        class Handler(_Handler):
            def do_GET(self) -> None:
                with site._lock:
                    site.hits[self.path] = site.hits.get(self.path, 0) + 1
                    hits = site.hits[self.path]
                    site.requests.append((self.path, self.headers.get("If-None-Match")))
                    site.cookies.append((self.path, self.headers.get("Cookie")))
                path = self.path.removeprefix("/api?url=")
                kind, _, number = path.strip("/").partition("/")
                cookie = self.headers.get("Cookie") or ""
                member = any(part.strip().removeprefix("sid=") in site.sessions for part in cookie.split(";"))
                if kind == "login":
                    token = f"t{len(site.tokens)}-{time.monotonic_ns()}"
                    site.tokens.add(token)
                    self._send(200, f"<html><form method=post action=/login><input type=hidden name=token "
                                    f"value={token}></form></html>".encode(), {"Content-Type": "text/html"})
                elif kind in ("members", "welcome") and not member:
                    self._send(302, b"", {"Location": f"/login?next={path}"})
                elif kind == "welcome":
                    self._send(200, b"<html><h1>welcome</h1></html>", {"Content-Type": "text/html"})
                elif path in site.moved:
                    self._send(site.moved_status, b"", {"Location": site.moved[path]})
                elif path in site.sold:
                    self._send(200, b"<html><p class=sold>This listing is no longer available.</p></html>",
                               {"Content-Type": "text/html"})
                elif kind == "robots.txt":
                    self._send(200, b"User-agent: *\nDisallow: /private/\n",
                               {"Content-Type": "text/plain", "Cache-Control": "max-age=86400"})
                elif kind == "error" or (kind == "sometimes" and site.missing):
                    self._send(500 if kind == "error" else 404, b"no")
                elif kind == "removed":
                    self._send(410, b"removed for good")
                elif kind == "redirect":
                    self._send(301, b"", {"Location": f"/page/{number}"})
                elif kind in ("refresh", "interstitial"):
                    delay = 0 if kind == "refresh" else 30
                    self._send(200, f'<html><head><meta http-equiv="refresh" content="{delay}; url=/page/{number}">'
                                    f'</head><body>moved</body></html>'.encode(), {"Content-Type": "text/html"})
                elif kind == "flaky" and (hits == 1 or (site.flaky_odd and hits % 2)):
                    self._send(503, b"busy")
                elif kind == "sized" and number.isdigit():
                    self._send(200, f"<html><p>{'x' * 100 * int(number)}</p></html>".encode(), {"Content-Type": "text/html"})
                elif kind in ("page", "flaky", "sometimes", "private", "members"):
                    etag = f'"{kind}-{number}-v{site.version}"'
                    if site.validators and self.headers.get("If-None-Match") == etag:
                        self._send(304, b"", {"ETag": etag})
                        return
                    body = f"<html><h1>{kind} {number} v{site.version}</h1>{'<p>filler</p>' * 200}</html>".encode()
                    headers = {"Content-Type": "text/html", **site.page_headers}
                    if site.validators:
                        headers["ETag"] = etag
                    if site.gzip and "gzip" in (self.headers.get("Accept-Encoding") or ""):
                        body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
                    self._send(200, body, headers)
                else:
                    self._send(404, b"gone")

            def do_POST(self) -> None:
                form = parse_qs(self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode())
                with site._lock:
                    site.hits[f"POST {self.path}"] = site.hits.get(f"POST {self.path}", 0) + 1
                    token = form.get("token", [""])[0]
                    valid = self.path == "/login" and token in site.tokens
                    site.tokens.discard(token)
                    session = f"s{len(site.sessions)}"
                    if valid:
                        site.sessions.add(session)
                if valid:
                    self._send(302, b"", {"Location": "/welcome", "Set-Cookie": f"sid={session}; Path=/"})
                else:
                    self._send(403, b"<html><h1>bad token</h1></html>", {"Content-Type": "text/html"})

            def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
                super()._send(status, body, headers)
                with site._lock:
                    site.body_bytes += len(body)

        self._serve(Handler)


class ForwardProxy(_LoopbackServer):
    """A loopback HTTP forward proxy (absolute-URI GETs only), counting what it relays."""

    def __init__(self) -> None:
        self.relayed = 0
        proxy = self

        class Handler(_Handler):
            def do_GET(self) -> None:
                target = urlsplit(self.path)
                headers = {k: v for k, v in self.headers.items() if not k.lower().startswith("proxy-")}
                connection = http.client.HTTPConnection(target.hostname or "", target.port or 80, timeout=10)
                try:
                    connection.request("GET", target.path + (f"?{target.query}" if target.query else ""),
                                       headers=headers)
                    answer = connection.getresponse()
                    body = answer.read()
                finally:
                    connection.close()
                proxy.relayed += 1
                self._send(answer.status, body, {name: value for name, value in answer.getheaders()
                                                 if name.lower() not in ("connection", "transfer-encoding",
                                                                         "content-length")})

        self._serve(Handler)


class ThrottlingSite(_LoopbackServer):
    """``/p/N`` pages on *address*; with *quota*, after that many page requests the host answers 429 with a
    ``Retry-After`` of *retry_after* seconds (an HTTP-date with *as_date*) to every page request until the
    pause is over, then serves *quota* more; *failing* answers 503 to every page (but every *answer_every*-th
    page request, when that is set). ``/robots.txt`` is always
    served. *log* keeps each page
    request as (arrival time, path, status, whether it arrived inside a pause the host had announced)."""

    def __init__(self, address: str = "127.0.0.1", quota: int | None = None, retry_after: float = 2.0,
                 as_date: bool = False) -> None:
        self.quota = quota
        self.retry_after = retry_after
        self.as_date = as_date
        self.announce: str | None = None  # a Retry-After to send instead of the true pause
        self.failing = False  # 503 (no Retry-After) to every page request
        self.answer_every: int | None = None  # while failing, every answer_every-th page request is answered
        self.version = 0
        self.log: list[tuple[float, str, int, bool]] = []
        self._served = 0
        self._paused_until = 0.0
        self._lock = threading.Lock()
        site = self

        class Handler(_Handler):
            def do_GET(self) -> None:
                if self.path == "/robots.txt":
                    self._send(200, b"User-agent: *\nAllow: /\n", {})
                    return
                now = time.time()
                with site._lock:
                    inside = now < site._paused_until
                    if not inside and site.quota is not None and site._served >= site.quota:
                        site._paused_until, site._served = now + site.retry_after, 0
                    throttled = now < site._paused_until
                    site._served += not throttled
                    site.log.append((now, self.path, 429 if throttled else 200, inside))
                    pause_end = site._paused_until
                    answered = site.answer_every is not None and len(site.log) % site.answer_every == 0
                if site.failing and not answered:
                    self._send(503, b"down", {})
                    return
                if throttled:
                    wait = site.announce or (formatdate(pause_end + 1, usegmt=True) if site.as_date
                                             else str(max(1, round(pause_end - now + 0.5))))
                    self._send(429, b"slow down", {"Retry-After": wait})
                    return
                body = f"<html><h1>{self.path} v{site.version}</h1>{'<p>text</p>' * 100}</html>".encode()
                self._send(200, body, {"Content-Type": "text/html"})

        self._serve(Handler, address)

    @property
    def inside_pause(self) -> int:
        """Page requests that arrived while a pause this host announced was running."""
        return sum(inside for *_, inside in self.log)
