"""Serve a :class:`~demo_site.catalog.Catalog` over HTTP as it looks at the shared clock's "now".

Stdlib only, loopback only. Every request reads :func:`demo_site.clock.now`, so the demo driver moves
the whole site through simulated days by rewriting one file.

By default the site is one honest host on 127.0.0.1: ``ETag`` and ``Last-Modified`` describe exactly
the version served and conditional requests get ``304`` only when nothing changed. Real hosts treat
validators less kindly, so the site can also serve several hosts, host *i* on 127.0.0.\\ *i+1* (each
its own address, so a crawler sees distinct hosts), each with one of :data:`VALIDATOR_MODES`:

* ``honour``: honest validators; ``304`` only when nothing changed (If-None-Match wins, RFC 9110 13.1);
* ``ignore``: honest validators, but always ``200`` with the full body;
* ``rotate``: a new ``ETag`` on every response (If-None-Match never matches); ``Last-Modified`` is
  honest and If-Modified-Since is honoured when no If-None-Match is sent;
* ``false304``: honest validators on full responses, but ``304`` to any conditional request for a
  page that exists, echoing the request's validators, whatever changed;
* ``none``: no ``ETag``, no ``Last-Modified``, always ``200``.

Listings stay on the first (main) host and link each product on host ``id % hosts``, so one crawl
from the main host's start URLs reaches every host. A page requested from another host than its own
is ``404``; every host serves ``/robots.txt``. With a byte log, each request appends one JSON line
with the bytes it moved and whether the page truly changed since the validators it carried
(:mod:`demo_site.wire`), the ground truth for counting false ``304``\\ s.

Whatever its validator mode, a host can also *throttle* (:class:`Throttle`), as rate-limited APIs and
shops do: after ``quota`` requests in one simulated day it answers ``429 Too Many Requests`` with a
``Retry-After`` to everything but ``/robots.txt`` for ``retry_after`` *real* seconds (the simulated
clock stands still while a day's crawl runs), then serves another ``quota`` requests, and so on; a
new simulated day restarts the count (a running block still runs out its real seconds). Byte log
lines carry the real arrival ``time``; ``inside_block`` says whether the request arrived while a
``Retry-After`` the host had already sent was still running, the ground truth for "no request
reaches the host before the time it was given" (``announced_at``, when the block's first ``429``
left, tells a request that was already in flight on another connection from one sent later);
a ``429`` line's ``blocked_until`` is the block's end, both on the wall clock.
"""

from __future__ import annotations

import argparse
import html
import itertools
import math
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass
from email.utils import formatdate, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, NamedTuple

from demo_site import clock
from demo_site.catalog import DAY, EPOCH0, Catalog
from demo_site.wire import ByteLog, CountingReader, HeldWriter

if TYPE_CHECKING:
    import io
    import os
    from collections.abc import Callable, Mapping, Sequence
    from types import FrameType

_PRODUCT = re.compile(r"/product/(\d+)")
_CATEGORY = re.compile(r"/category/(\d+)")
# The site's own ETags: "<page key>-v<version>", plus "-r<n>" on a rotating host.
_OUR_ETAG = re.compile(r'(?:W/)?"(?P<key>[pc]\d+)-v(?P<version>\d+)(?:-r\d+)?"')
ROBOTS_TXT = "User-agent: *\nAllow: /\n"

#: How a host's ``Last-Modified`` behaves: ``honest`` (the served version's change time), ``volatile``
#: (the time of the request, as pages rendered on the fly often send) or ``frozen`` (never moves).
LAST_MODIFIED_MODES = ("honest", "volatile", "frozen")
#: How a host treats HTTP validators (see the module docstring).
VALIDATOR_MODES = ("honour", "ignore", "rotate", "false304", "none")
#: Addresses 127.0.0.1 .. 127.0.0.254; Linux routes all of 127.0.0.0/8 to loopback.
MAX_HOSTS = 254


@dataclass(frozen=True)
class Throttle:
    """How a host throttles: *quota* requests served, then ``429`` for *retry_after* real seconds.

    ``Retry-After`` gives the seconds left, rounded up, or with *as_date* an HTTP-date (RFC 9110
    10.2.3) on the simulated clock, the one the ``Date`` header follows.
    """

    quota: int
    retry_after: float
    as_date: bool = False

    def __post_init__(self) -> None:
        if self.quota < 1:
            raise ValueError(f"throttle quota must be >= 1, not {self.quota!r}")
        if not self.retry_after > 0 or math.isinf(self.retry_after):
            raise ValueError(f"throttle retry_after must be a positive number of seconds, not {self.retry_after!r}")


class _Admission(NamedTuple):
    """What a throttling host decided for one request."""

    wait: float | None  # seconds of the block left (answer 429), or None (serve)
    block: int  # which block the 429 belongs to, so its announcement dates the right one
    inside_block: bool  # the request arrived while an announced Retry-After was still running
    blocked_until: float | None  # wall-clock end of the block when answering 429
    announced_at: float | None = None  # when inside: wall-clock time the block's first 429 left


class ThrottleGate:
    """One host's throttle state, shared by the threads of its ThreadingHTTPServer.

    Blocks are timed on *monotonic* (real seconds); the request count restarts with each simulated
    day and after each block. A block counts as announced once its first ``429`` has left the server,
    so a request racing that response on another connection is not blamed on the client.
    """

    def __init__(self, throttle: Throttle, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.throttle = throttle
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._day: int | None = None
        self._served = 0
        self._until: float | None = None  # monotonic end of the current block
        self._until_wall = 0.0  # the same end on the wall clock, for the byte log
        self._announced: float | None = None  # monotonic time its first 429 was sent
        self._announced_wall = 0.0
        self._block = 0

    def admit(self, day: int, arrived: float) -> _Admission:
        """Count a request of simulated *day* that arrived at monotonic time *arrived*."""
        with self._lock:
            now = self._monotonic()
            inside = (
                self._announced is not None and self._until is not None and self._announced <= arrived < self._until
            )
            announced_at = self._announced_wall if inside else None
            if day != self._day:
                self._day, self._served = day, 0
            if self._until is not None and now >= self._until:
                self._until = self._announced = None
                self._served = 0
            if self._until is None:
                if self._served < self.throttle.quota:
                    self._served += 1
                    return _Admission(None, self._block, inside, None, announced_at)
                self._until = now + self.throttle.retry_after
                self._until_wall = time.time() + self.throttle.retry_after
                self._block += 1
            return _Admission(self._until - now, self._block, inside, self._until_wall, announced_at)

    def announced(self, block: int, at: float, wall: float | None = None) -> None:
        """The first ``429`` of *block* left the server at monotonic time *at* (wall clock *wall*)."""
        with self._lock:
            if block == self._block and self._until is not None and self._announced is None:
                self._announced = at
                self._announced_wall = time.time() if wall is None else wall


def parse_throttle_spec(spec: str) -> tuple[int, Throttle]:
    """``"5:20:3"`` or ``"5:20:3:date"`` -> (host index, Throttle(quota=20, retry_after=3.0, ...))."""
    parts = spec.strip().split(":")
    if len(parts) not in (3, 4) or (len(parts) == 4 and parts[3] != "date"):
        raise ValueError(f"throttle must be INDEX:QUOTA:SECONDS or INDEX:QUOTA:SECONDS:date, not {spec!r}")
    try:
        index, quota, seconds = int(parts[0]), int(parts[1]), float(parts[2])
    except ValueError:
        raise ValueError(f"throttle {spec!r}: INDEX and QUOTA must be integers, SECONDS a number") from None
    if index < 0:
        raise ValueError(f"throttle {spec!r}: host index must be >= 0")
    return index, Throttle(quota, seconds, as_date=len(parts) == 4)


def _too_many_requests() -> bytes:
    return _html("Too many requests", "<h1>Too many requests</h1>\n<p>Come back after Retry-After.</p>").encode()


class _Server(ThreadingHTTPServer):
    # A crawl opens up to CONCURRENT_REQUESTS connections at once; with the default listen backlog of 5
    # the kernel drops the rest and the client retries a second later, long after it sent the request.
    request_queue_size = 64


class _Page:
    """A rendered response: status, body, the validators that describe it, and its true version."""

    def __init__(
        self,
        status: int,
        body: str,
        content_type: str = "text/html; charset=utf-8",
        etag: str | None = None,
        last_modified: float | None = None,
        key: str | None = None,
        version: int | None = None,
    ) -> None:
        self.status = status
        self.body = body.encode()
        self.content_type = content_type
        self.etag = etag
        self.last_modified = last_modified
        # Ground truth for the byte log, whatever the host's headers claim.
        self.key = key
        self.version = version
        self.changed_at = last_modified


class HostMap:
    """Which host serves which page, and each host's base URL (filled in once every host is bound)."""

    def __init__(self, hosts: int) -> None:
        if not 1 <= hosts <= MAX_HOSTS:
            raise ValueError(f"hosts must be between 1 and {MAX_HOSTS}, not {hosts!r}")
        self.urls: list[str] = [""] * hosts

    def __len__(self) -> int:
        return len(self.urls)

    def product_host(self, pid: int) -> int:
        return product_host(pid, len(self.urls))

    def href(self, path: str, home: int, here: int) -> str:
        """A relative link when *path* lives on the host serving the page, else an absolute one."""
        return path if home == here else self.urls[home] + path


def product_host(pid: int, hosts: int) -> int:
    """Index of the host that serves product *pid* on a site of *hosts* hosts (0 = main)."""
    return pid % hosts


def host_address(index: int) -> str:
    """The loopback address of host *index*: 127.0.0.1 for the main host, then .2, .3, ..."""
    return f"127.0.0.{index + 1}"


def _html(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title></head>\n<body>\n{body}\n</body></html>\n"
    )


def render(catalog: Catalog, path: str, t: float, hosts: HostMap | None = None, here: int = 0) -> _Page:
    """The page at *path* as host *here* serves it at time *t* (pure: the handler adds HTTP plumbing).

    Without *hosts* the site is one host and every link is relative.
    """
    site = hosts if hosts is not None else HostMap(1)
    path = path.split("?", 1)[0]
    if path == "/robots.txt":
        return _Page(200, ROBOTS_TXT, "text/plain; charset=utf-8")
    if path in ("/", "/index.html"):
        if here != 0:
            return _not_found()
        links = "\n".join(
            f'<li><a class="category" href="/category/{c}">{html.escape(catalog.category_name(c))}</a></li>'
            for c in range(catalog.categories)
        )
        return _Page(200, _html("Demo shop", f"<h1>Demo shop</h1>\n<ul>\n{links}\n</ul>"))
    if m := _CATEGORY.fullmatch(path):
        c = int(m.group(1))
        if c >= catalog.categories or here != 0:
            return _not_found()
        rows = "\n".join(
            f'<li><a class="product" href="{site.href(p.path, site.product_host(p.id), here)}" data-tier="{p.tier}">'
            f"{html.escape(catalog.content(p, 0).name)}</a> "
            f'<span class="badge tier-{p.tier}">{p.tier}</span></li>'
            for p in catalog.listing_at(c, t)
        )
        name = html.escape(catalog.category_name(c))
        version = catalog.listing_version_at(c, t)
        return _Page(
            200,
            _html(name, f'<h1 class="category">{name}</h1>\n<ul class="products">\n{rows}\n</ul>'),
            etag=f'"c{c}-v{version}"',
            last_modified=catalog.listing_last_modified(c, t),
            key=f"c{c}",
            version=version,
        )
    if m := _PRODUCT.fullmatch(path):
        pid = int(m.group(1))
        try:
            product = catalog.product(pid)
        except KeyError:
            return _not_found()
        content = catalog.content_at(product, t)
        if content is None or site.product_host(pid) != here:
            return _not_found()
        version = catalog.version_at(product, t)
        category = site.href(f"/category/{product.category}", 0, here)
        body = (
            f'<h1 class="name">{html.escape(content.name)}</h1>\n'
            f'<p>Price: $<span class="price">{content.price_text}</span></p>\n'
            f'<p>In stock: <span class="stock">{content.stock}</span></p>\n'
            f'<p>Category: <a class="category" href="{category}">'
            f"{html.escape(catalog.category_name(product.category))}</a></p>\n"
            f'<p class="description">{html.escape(catalog.description(product))}</p>\n'
            '<table class="specs">\n'
            + "".join(
                f'<tr class="spec"><th scope="row">{html.escape(label)}</th><td>{html.escape(value)}</td></tr>\n'
                for label, value in catalog.specifications(product)
            )
            + "</table>"
        )
        return _Page(
            200,
            _html(content.name, body),
            etag=f'"p{pid}-v{version}"',
            last_modified=catalog.last_modified(product, t),
            key=f"p{pid}",
            version=version,
        )
    return _not_found()


def _not_found() -> _Page:
    return _Page(404, _html("Not found", "<h1>Not found</h1>"))


def _parse_date(value: str) -> float | None:
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def _not_modified(page: _Page, if_none_match: str | None, if_modified_since: str | None) -> bool:
    """RFC 9110 section 13.1: If-None-Match wins; If-Modified-Since only when it is absent."""
    if page.status != 200:
        return False
    if if_none_match is not None:
        if page.etag is None:
            return False
        tags = [tag.strip().removeprefix("W/") for tag in if_none_match.split(",")]
        return "*" in tags or page.etag in tags
    if if_modified_since is not None and page.last_modified is not None:
        since = _parse_date(if_modified_since)
        # Change times are whole seconds, so this comparison is exact.
        return since is not None and page.last_modified <= since
    return False


def changed_since_validators(page: _Page, if_none_match: str | None, if_modified_since: str | None) -> bool | None:
    """Whether *page* truly changed since the version the request's validators describe.

    One of the site's own ETags for this page names a version exactly; otherwise a date says whether
    a change came after it. ``None`` when the request carries neither, or the page has no versions.
    """
    if page.status != 200 or page.key is None or page.version is None:
        return None
    if if_none_match is not None:
        versions = {
            int(m.group("version"))
            for tag in if_none_match.split(",")
            if (m := _OUR_ETAG.fullmatch(tag.strip())) and m.group("key") == page.key
        }
        if versions:
            return page.version not in versions
    if if_modified_since is not None and page.changed_at is not None:
        since = _parse_date(if_modified_since)
        if since is not None:
            return page.changed_at > since
    return None


def make_handler(
    catalog: Catalog,
    now: Callable[[], float] = clock.now,
    last_modified: str = "honest",
    mode: str = "honour",
    hosts: HostMap | None = None,
    here: int = 0,
    byte_log: ByteLog | None = None,
    throttle: Throttle | ThrottleGate | None = None,
) -> type[BaseHTTPRequestHandler]:
    """A request handler class for host *here* of *hosts*, serving *catalog* at the clock *now*.

    *last_modified* picks the ``Last-Modified`` dates, *mode* how validators are treated; with a
    *byte_log*, every request appends its record there; with a *throttle*, the host rations requests.
    """
    if last_modified not in LAST_MODIFIED_MODES:
        raise ValueError(f"last_modified must be one of {LAST_MODIFIED_MODES}, not {last_modified!r}")
    if mode not in VALIDATOR_MODES:
        raise ValueError(f"mode must be one of {VALIDATOR_MODES}, not {mode!r}")
    rotation = itertools.count(1)  # next() on a count is atomic under the GIL
    address = host_address(here)
    gate = ThrottleGate(throttle) if isinstance(throttle, Throttle) else throttle

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: Scrapy reuses connections
        server_version = "DemoShop/1.0"
        rfile: CountingReader
        wfile: HeldWriter

        def setup(self) -> None:
            super().setup()
            reader: io.BufferedIOBase = self.rfile
            writer: io.BufferedIOBase = self.wfile
            self.rfile = CountingReader(reader)
            self.wfile = HeldWriter(writer)

        def handle_one_request(self) -> None:
            # Per-request byte counts on a keep-alive connection: reset, handle, log, then send.
            self.rfile.reset()
            self.wfile.reset()
            self.path = ""
            self._status: int | None = None
            self._record: dict[str, Any] = {"conditional": False, "changed_since_validators": None}
            self._arrived: tuple[float, float] | None = None  # (time.time(), time.monotonic())
            self._admission: _Admission | None = None
            self._sim_time: float | None = None
            try:
                super().handle_one_request()
            finally:
                if byte_log is not None and self.rfile.count:
                    arrived = self._arrived[0] if self._arrived is not None else time.time()
                    admission = self._admission
                    byte_log.append(
                        {
                            "host": address,
                            "mode": mode,
                            "last_modified": last_modified,
                            "method": getattr(self, "command", None) or "",
                            "path": self.path,
                            "status": self._status,
                            "received": self.rfile.count,
                            "sent": self.wfile.count,
                            **self._record,
                            "time": arrived,
                            "inside_block": admission is not None and admission.inside_block,
                            "blocked_until": None if admission is None else admission.blocked_until,
                            "announced_at": None if admission is None else admission.announced_at,
                        }
                    )
                # Announce before sending: a request its client sends after reading this 429 must find
                # the block announced (announcing after the send raced the client's next request).
                if gate is not None and self._admission is not None and self._admission.wait is not None:
                    gate.announced(self._admission.block, time.monotonic(), time.time())
                self.wfile.release()

        def parse_request(self) -> bool:
            # The request line is in: the request has arrived (a keep-alive wait is not part of it).
            self._arrived = (time.time(), time.monotonic())
            return super().parse_request()

        def handle_expect_100(self) -> bool:
            ok = super().handle_expect_100()
            self.wfile.release()  # the client waits for the interim response before sending a body
            return ok

        def send_response_only(self, code: int, message: str | None = None) -> None:
            if code >= 200:
                self._status = code
            super().send_response_only(code, message)

        def do_GET(self) -> None:
            self._respond(send_body=True)

        def do_HEAD(self) -> None:
            self._respond(send_body=False)

        def _discard_body(self) -> None:
            """Read a request body nobody asked for, so keep-alive stays in step and it is counted."""
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = 0
            while length > 0:
                chunk = self.rfile.read(min(length, 65536))
                if not chunk:
                    break
                length -= len(chunk)

        def _respond(self, *, send_body: bool) -> None:
            self._discard_body()
            t = now()
            if gate is not None and self.path.split("?", 1)[0] != "/robots.txt":
                arrived = self._arrived[1] if self._arrived is not None else time.monotonic()
                self._admission = gate.admit(math.floor((t - EPOCH0) / DAY), arrived)
                if self._admission.wait is not None:
                    self._throttled(t, self._admission.wait, send_body=send_body)
                    return
            page = render(catalog, self.path, t, hosts, here)
            if page.last_modified is not None and last_modified != "honest":
                page.last_modified = float(int(t)) if last_modified == "volatile" else catalog.start
            if_none_match = self.headers.get("If-None-Match")
            if_modified_since = self.headers.get("If-Modified-Since")
            conditional = if_none_match is not None or if_modified_since is not None
            self._record = {
                "conditional": conditional,
                "changed_since_validators": changed_since_validators(page, if_none_match, if_modified_since),
            }
            etag, modified = page.etag, page.last_modified
            modified_text = None if modified is None else formatdate(modified, usegmt=True)
            status = page.status
            if mode == "honour":
                if _not_modified(page, if_none_match, if_modified_since):
                    status = 304
            elif mode == "rotate":
                if etag is not None:
                    etag = f'{etag[:-1]}-r{next(rotation)}"'
                if if_none_match is None and _not_modified(page, None, if_modified_since):
                    status = 304
            elif mode == "false304":
                if page.status == 200 and conditional:
                    # The lie that is hardest to see: "still the version you have", in its own words.
                    status = 304
                    etag = if_none_match.split(",")[0].strip() if if_none_match is not None else None
                    modified_text = if_modified_since
            elif mode == "none":
                etag = modified_text = None
            self.send_response(status)
            if etag is not None:
                self.send_header("ETag", etag)
            if modified_text is not None:
                self.send_header("Last-Modified", modified_text)
            if status == 304:
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_header("Content-Type", page.content_type)
            self.send_header("Content-Length", str(len(page.body)))
            self.end_headers()
            if send_body:
                self.wfile.write(page.body)

        def _throttled(self, t: float, wait: float, *, send_body: bool) -> None:
            """``429`` with the time the block has left; a date form is on the simulated clock."""
            assert gate is not None
            if gate.throttle.as_date:
                # Date and Retry-After from the same reading, each date at least *wait* after it.
                self._sim_time = t
                retry_after = formatdate(math.ceil(t + wait), usegmt=True)
            else:
                retry_after = str(max(1, math.ceil(wait)))
            body = _too_many_requests()
            self.send_response(429)
            self.send_header("Retry-After", retry_after)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if send_body:
                self.wfile.write(body)

        def date_time_string(self, timestamp: float | None = None) -> str:
            # The Date header follows the simulated clock, so clients can age Last-Modified.
            if timestamp is None:
                timestamp = now() if self._sim_time is None else self._sim_time
            return formatdate(timestamp, usegmt=True)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib signature)
            pass  # quiet: the crawler's own stats say what was fetched

    return Handler


def parse_host_spec(spec: str, last_modified: str = "honest") -> tuple[str, str]:
    """``"rotate"`` or ``"rotate:volatile"`` -> (validator mode, Last-Modified mode)."""
    mode, _, dates = spec.strip().partition(":")
    dates = dates or last_modified
    if mode not in VALIDATOR_MODES:
        raise ValueError(f"host mode must be one of {VALIDATOR_MODES}, not {mode!r}")
    if dates not in LAST_MODIFIED_MODES:
        raise ValueError(f"last_modified must be one of {LAST_MODIFIED_MODES}, not {dates!r}")
    return mode, dates


class SiteServer:
    """Every host of one demo site: host *i* listens on 127.0.0.\\ *i+1*, each on its own port.

    *hosts* lists one validator mode per host, the main host first, optionally with its own
    ``Last-Modified`` mode (``"rotate:volatile"``); *last_modified* applies to the others. *throttle*
    maps a host index to its :class:`Throttle`, whatever its validator mode. *port* 0 gives each host
    a free port; another value binds that port on every address. Quacks like one server
    (``shutdown``, ``server_close``, ``server_address`` of the main host) for older callers.
    """

    def __init__(
        self,
        catalog: Catalog,
        port: int = 0,
        last_modified: str = "honest",
        hosts: Sequence[str] = ("honour",),
        byte_log: str | os.PathLike[str] | None = None,
        now: Callable[[], float] = clock.now,
        throttle: Mapping[int, Throttle] | None = None,
    ) -> None:
        specs = [parse_host_spec(spec, last_modified) for spec in hosts]
        self.modes: tuple[str, ...] = tuple(mode for mode, _ in specs)
        self.last_modified: tuple[str, ...] = tuple(dates for _, dates in specs)
        self.host_map = HostMap(len(specs))
        throttle = dict(throttle or {})
        if bad := sorted(i for i in throttle if not 0 <= i < len(specs)):
            raise ValueError(f"throttle names host index {bad[0]}, but the site has hosts 0..{len(specs) - 1}")
        #: host index -> its throttle state (the gates are shared with the handlers, for tests to inspect)
        self.throttles: dict[int, ThrottleGate] = {i: ThrottleGate(t) for i, t in sorted(throttle.items())}
        self.byte_log: ByteLog | None = ByteLog(byte_log) if byte_log is not None else None
        self.servers: list[ThreadingHTTPServer] = []
        self._running: list[ThreadingHTTPServer] = []  # shutdown() blocks unless serve_forever runs
        try:
            for i, (mode, dates) in enumerate(specs):
                gate = self.throttles.get(i)
                handler = make_handler(catalog, now, dates, mode, self.host_map, i, self.byte_log, gate)
                server = _Server((host_address(i), port), handler)
                server.daemon_threads = True
                self.servers.append(server)
                self.host_map.urls[i] = f"http://{host_address(i)}:{server.server_address[1]}"
        except BaseException:
            self.server_close()
            raise

    @property
    def url(self) -> str:
        """Base URL of the main host, which serves the front page and every listing."""
        return self.host_map.urls[0]

    @property
    def urls(self) -> tuple[str, ...]:
        """Base URL of every host, in the order of *hosts*."""
        return tuple(self.host_map.urls)

    @property
    def server_address(self) -> tuple[str | bytes | bytearray, int]:
        return self.servers[0].server_address  # type: ignore[return-value]

    def url_for(self, mode: str) -> str:
        """Base URL of the first host with validator *mode* (KeyError if the site has none)."""
        for url, host_mode in zip(self.urls, self.modes, strict=True):
            if host_mode == mode:
                return url
        raise KeyError(mode)

    def url_for_throttled(self) -> str:
        """Base URL of the first throttling host (KeyError if no host throttles)."""
        if not self.throttles:
            raise KeyError("throttle")
        return self.host_map.urls[min(self.throttles)]

    def product_url(self, pid: int) -> str:
        """Where product *pid* is served."""
        return f"{self.host_map.urls[self.host_map.product_host(pid)]}/product/{pid}"

    def products_on(self, mode: str, catalog: Catalog, t: float) -> list[int]:
        """Ids of the products that exist at *t* and live on the first host with *mode*."""
        return self.products_of(self.urls.index(self.url_for(mode)), catalog, t)

    def products_of(self, index: int, catalog: Catalog, t: float) -> list[int]:
        """Ids of the products that exist at *t* and live on host *index*."""
        return [p.id for p in catalog.existing(t) if self.host_map.product_host(p.id) == index]

    def start(self) -> SiteServer:
        """Serve every host on its own daemon thread."""
        for i, server in enumerate(self.servers):
            threading.Thread(target=server.serve_forever, name=f"demo-site-{i}", daemon=True).start()
            self._running.append(server)
        return self

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Serve the main host on this thread (so signals unwind it) and the others on threads."""
        for i, server in enumerate(self.servers[1:], start=1):
            thread = threading.Thread(
                target=server.serve_forever, args=(poll_interval,), name=f"demo-site-{i}", daemon=True
            )
            thread.start()
            self._running.append(server)
        try:
            self.servers[0].serve_forever(poll_interval)
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        while self._running:
            self._running.pop().shutdown()

    def server_close(self) -> None:
        for server in self.servers:
            server.server_close()

    def close(self) -> None:
        """Stop serving and release every host's socket."""
        self.shutdown()
        self.server_close()

    def describe(self) -> str:
        """``mode=URL`` for every host, space-separated (what ``python -m demo_site`` prints)."""
        return " ".join(
            f"{mode if dates == 'honest' else f'{mode}:{dates}'}={url}"
            for mode, dates, url in zip(self.modes, self.last_modified, self.urls, strict=True)
        )


def make_server(catalog: Catalog, port: int = 0, last_modified: str = "honest") -> ThreadingHTTPServer:
    """A loopback-only threaded server for *catalog*, one honest host (port 0 picks a free port)."""
    server = _Server(("127.0.0.1", port), make_handler(catalog, last_modified=last_modified))
    server.daemon_threads = True
    return server


def serve_in_thread(
    catalog: Catalog,
    port: int = 0,
    last_modified: str = "honest",
    hosts: Sequence[str] = ("honour",),
    byte_log: str | os.PathLike[str] | None = None,
    throttle: Mapping[int, Throttle] | None = None,
) -> tuple[SiteServer, str]:
    """Start every host of a site on background threads (for tests); returns it and the main URL.

    ``site.url_for("false304")`` is a mode's base URL, ``site.url_for_throttled()`` the first
    throttling host's, ``site.product_url(pid)`` a product's page.
    """
    site = SiteServer(catalog, port, last_modified, hosts, byte_log, throttle=throttle).start()
    return site, site.url


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m demo_site",
        description="Serve the seeded demo shop on loopback; time comes from $DEMO_CLOCK_FILE.",
    )
    parser.add_argument("--port", type=int, default=0, help="0 (default) picks a free port per host")
    parser.add_argument("--products", type=int, default=300)
    parser.add_argument("--categories", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--horizon-days", type=float, default=60.0)
    parser.add_argument("--new-per-day", type=float, default=None, help="default: 1%% of --products")
    parser.add_argument("--start", type=float, default=EPOCH0, help="epoch seconds of day 0")
    parser.add_argument("--last-modified", choices=LAST_MODIFIED_MODES, default="honest",
                        help="how the Last-Modified header behaves (default: honest)")
    parser.add_argument("--hosts", default="honour",
                        help="comma-separated validator modes, one host each, main host first, from "
                             f"{','.join(VALIDATOR_MODES)}; MODE:LAST_MODIFIED overrides --last-modified "
                             "for one host (default: honour, one honest host)")
    parser.add_argument("--throttle", action="append", default=[], metavar="INDEX:QUOTA:SECONDS[:date]",
                        help="host INDEX (0 = main) answers 429 after QUOTA requests a simulated day, "
                             "with Retry-After SECONDS (real time; ':date' sends an HTTP-date), then "
                             "serves QUOTA more; robots.txt is never throttled (repeatable)")
    parser.add_argument("--byte-log", metavar="FILE",
                        help="append one JSON line per request: host, mode, path, status, bytes received "
                             "and sent, conditional, changed_since_validators, time, inside_block, "
                             "blocked_until")
    return parser


def parse_throttles(specs: Sequence[str], hosts: int) -> dict[int, Throttle]:
    """Every ``--throttle`` spec, checked against a site of *hosts* hosts (ValueError names the bad one)."""
    throttles: dict[int, Throttle] = {}
    for spec in specs:
        index, throttle = parse_throttle_spec(spec)
        if index >= hosts:
            raise ValueError(f"throttle {spec!r}: no host {index}, the site has hosts 0..{hosts - 1}")
        if index in throttles:
            raise ValueError(f"throttle {spec!r}: host {index} already throttles")
        throttles[index] = throttle
    return throttles


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    hosts = [spec for spec in args.hosts.split(",") if spec.strip()]
    try:
        for spec in hosts:
            parse_host_spec(spec, args.last_modified)
        HostMap(len(hosts))
    except ValueError as exc:
        parser.error(f"--hosts: {exc}")
    try:
        throttles = parse_throttles(args.throttle, len(hosts))
    except ValueError as exc:
        parser.error(f"--throttle: {exc}")
    catalog = Catalog.generate(
        products=args.products,
        categories=args.categories,
        seed=args.seed,
        start=args.start,
        horizon_days=args.horizon_days,
        new_per_day=args.new_per_day,
    )
    site = SiteServer(catalog, args.port, args.last_modified, hosts, args.byte_log, throttle=throttles)

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(0)  # unwinds serve_forever in the main thread; finally closes the sockets

    signal.signal(signal.SIGTERM, stop)
    # One line, main URL second: "DEMO_SITE http://127.0.0.1:P honour=http://127.0.0.1:P ignore=...".
    print(f"DEMO_SITE {site.url} {site.describe()}", flush=True)
    try:
        site.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        site.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
