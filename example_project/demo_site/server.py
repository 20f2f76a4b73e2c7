"""Serve a :class:`~demo_site.catalog.Catalog` over HTTP as it looks at the shared clock's "now".

Stdlib only, loopback only. Every request reads :func:`demo_site.clock.now`, so the demo driver moves
the whole site through simulated days by rewriting one file. The server is an honest host: ``ETag``
and ``Last-Modified`` describe exactly the version served and conditional requests get ``304`` only
when nothing changed, which is what cost-aware revisiting with validators is meant to exploit.
"""

from __future__ import annotations

import argparse
import html
import re
import signal
import sys
import threading
from email.utils import formatdate, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from demo_site import clock
from demo_site.catalog import EPOCH0, Catalog

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType

_PRODUCT = re.compile(r"/product/(\d+)")
_CATEGORY = re.compile(r"/category/(\d+)")
ROBOTS_TXT = "User-agent: *\nAllow: /\n"


class _Page:
    """A rendered response: status, body, and the validators that describe it."""

    def __init__(
        self,
        status: int,
        body: str,
        content_type: str = "text/html; charset=utf-8",
        etag: str | None = None,
        last_modified: float | None = None,
    ) -> None:
        self.status = status
        self.body = body.encode()
        self.content_type = content_type
        self.etag = etag
        self.last_modified = last_modified


def _html(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title></head>\n<body>\n{body}\n</body></html>\n"
    )


def render(catalog: Catalog, path: str, t: float) -> _Page:
    """The page at *path* as of time *t* (pure: the handler only adds HTTP plumbing)."""
    path = path.split("?", 1)[0]
    if path == "/robots.txt":
        return _Page(200, ROBOTS_TXT, "text/plain; charset=utf-8")
    if path in ("/", "/index.html"):
        links = "\n".join(
            f'<li><a class="category" href="/category/{c}">{html.escape(catalog.category_name(c))}</a></li>'
            for c in range(catalog.categories)
        )
        return _Page(200, _html("Demo shop", f"<h1>Demo shop</h1>\n<ul>\n{links}\n</ul>"))
    if m := _CATEGORY.fullmatch(path):
        c = int(m.group(1))
        if c >= catalog.categories:
            return _not_found()
        rows = "\n".join(
            f'<li><a class="product" href="{p.path}" data-tier="{p.tier}">'
            f"{html.escape(catalog.content(p, 0).name)}</a> "
            f'<span class="badge tier-{p.tier}">{p.tier}</span></li>'
            for p in catalog.listing_at(c, t)
        )
        name = html.escape(catalog.category_name(c))
        return _Page(
            200,
            _html(name, f'<h1 class="category">{name}</h1>\n<ul class="products">\n{rows}\n</ul>'),
            etag=f'"c{c}-v{catalog.listing_version_at(c, t)}"',
            last_modified=catalog.listing_last_modified(c, t),
        )
    if m := _PRODUCT.fullmatch(path):
        pid = int(m.group(1))
        try:
            product = catalog.product(pid)
        except KeyError:
            return _not_found()
        content = catalog.content_at(product, t)
        if content is None:
            return _not_found()
        version = catalog.version_at(product, t)
        body = (
            f'<h1 class="name">{html.escape(content.name)}</h1>\n'
            f'<p>Price: $<span class="price">{content.price_text}</span></p>\n'
            f'<p>In stock: <span class="stock">{content.stock}</span></p>\n'
            f'<p>Category: <a class="category" href="/category/{product.category}">'
            f"{html.escape(catalog.category_name(product.category))}</a></p>\n"
            f'<p class="description">{html.escape(catalog.description(product))}</p>'
        )
        return _Page(
            200,
            _html(content.name, body),
            etag=f'"p{pid}-v{version}"',
            last_modified=catalog.last_modified(product, t),
        )
    return _not_found()


def _not_found() -> _Page:
    return _Page(404, _html("Not found", "<h1>Not found</h1>"))


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
        try:
            since = parsedate_to_datetime(if_modified_since).timestamp()
        except (TypeError, ValueError, IndexError, OverflowError):
            return False
        # Change times are whole seconds, so this comparison is exact.
        return page.last_modified <= since
    return False


#: How a host's ``Last-Modified`` behaves: ``honest`` (the served version's change time), ``volatile``
#: (the time of the request, as pages rendered on the fly often send) or ``frozen`` (never moves).
LAST_MODIFIED_MODES = ("honest", "volatile", "frozen")


def make_handler(
    catalog: Catalog, now: Callable[[], float] = clock.now, last_modified: str = "honest"
) -> type[BaseHTTPRequestHandler]:
    """A request handler class bound to *catalog* and the clock *now*, with *last_modified* dates."""
    if last_modified not in LAST_MODIFIED_MODES:
        raise ValueError(f"last_modified must be one of {LAST_MODIFIED_MODES}, not {last_modified!r}")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: Scrapy reuses connections
        server_version = "DemoShop/1.0"

        def do_GET(self) -> None:
            self._respond(send_body=True)

        def do_HEAD(self) -> None:
            self._respond(send_body=False)

        def _respond(self, *, send_body: bool) -> None:
            t = now()
            page = render(catalog, self.path, t)
            if page.last_modified is not None and last_modified != "honest":
                page.last_modified = float(int(t)) if last_modified == "volatile" else catalog.start
            status = page.status
            if _not_modified(page, self.headers.get("If-None-Match"), self.headers.get("If-Modified-Since")):
                status = 304
            self.send_response(status)
            if page.etag is not None:
                self.send_header("ETag", page.etag)
            if page.last_modified is not None:
                self.send_header("Last-Modified", formatdate(page.last_modified, usegmt=True))
            if status == 304:
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_header("Content-Type", page.content_type)
            self.send_header("Content-Length", str(len(page.body)))
            self.end_headers()
            if send_body:
                self.wfile.write(page.body)

        def date_time_string(self, timestamp: float | None = None) -> str:
            # The Date header follows the simulated clock, so clients can age Last-Modified.
            return formatdate(now() if timestamp is None else timestamp, usegmt=True)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib signature)
            pass  # quiet: the crawler's own stats say what was fetched

    return Handler


def make_server(catalog: Catalog, port: int = 0, last_modified: str = "honest") -> ThreadingHTTPServer:
    """A loopback-only threaded server for *catalog* (port 0 picks a free port)."""
    server = ThreadingHTTPServer(("127.0.0.1", port), make_handler(catalog, last_modified=last_modified))
    server.daemon_threads = True
    return server


def serve_in_thread(catalog: Catalog, port: int = 0, last_modified: str = "honest") -> tuple[ThreadingHTTPServer, str]:
    """Start a server on a background thread (for tests); returns it and its base URL."""
    server = make_server(catalog, port, last_modified)
    threading.Thread(target=server.serve_forever, name="demo-site", daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m demo_site",
        description="Serve the seeded demo shop on 127.0.0.1; time comes from $DEMO_CLOCK_FILE.",
    )
    parser.add_argument("--port", type=int, default=0, help="0 (default) picks a free port")
    parser.add_argument("--products", type=int, default=300)
    parser.add_argument("--categories", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--horizon-days", type=float, default=60.0)
    parser.add_argument("--new-per-day", type=float, default=None, help="default: 1%% of --products")
    parser.add_argument("--start", type=float, default=EPOCH0, help="epoch seconds of day 0")
    parser.add_argument("--last-modified", choices=LAST_MODIFIED_MODES, default="honest",
                        help="how the Last-Modified header behaves (default: honest)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    catalog = Catalog.generate(
        products=args.products,
        categories=args.categories,
        seed=args.seed,
        start=args.start,
        horizon_days=args.horizon_days,
        new_per_day=args.new_per_day,
    )
    server = make_server(catalog, args.port, args.last_modified)

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(0)  # unwinds serve_forever in the main thread; finally closes the socket

    signal.signal(signal.SIGTERM, stop)
    print(f"DEMO_SITE http://127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
