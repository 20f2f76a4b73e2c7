"""Calibrate ``COSTSCHED_REQUEST_OVERHEAD``: the bytes a proxy bills per request that the crawler never sees.

The add-on bills each download attempt by the bytes it can see (:mod:`scrapy_costsched.metering`: request
and response, headers included, body as transferred). A proxy provider bills everything between the
crawler and the proxy: also the CONNECT exchange, the TLS handshake inside the tunnel and TLS's record
framing. This script measures the difference on loopback, with real ``scrapy runspider`` crawls:

* an HTTPS origin (``http.server`` + ``ssl``, HTTP/1.1 keep-alive, ``Content-Length``; a throwaway
  self-signed certificate for 127.0.0.1/localhost) and a plain HTTP one, serving pages of 2 kB, 20 kB
  and 100 kB in turn;
* a forward proxy (CONNECT tunnels, and absolute-URI GETs relayed to the origin) that counts every byte it
  reads from and writes to the crawler's socket, which is what a proxy provider bills;
* a counting TCP relay in front of the HTTPS origin, for HTTPS without a proxy (the TLS cost alone).

Each crawl runs the add-on with ``COSTSCHED_BILLING=bandwidth`` and no budget (shadow mode: every request
goes out); the proxy comes from ``https_proxy``/``http_proxy`` (Scrapy's HttpProxyMiddleware) and certificates
are not verified (Scrapy's default). The crawler's count is the stats ``costsched/bytes/sent`` +
``costsched/bytes/received``. Scenarios:

(a) HTTPS via the CONNECT proxy, Scrapy's defaults (connections kept alive and reused);
(b) HTTPS via the proxy, one connection per request: the origin answers ``Connection: close`` and closes,
    so every request opens a new tunnel (CONNECT + TLS handshake), as with a proxy that rotates per request;
(c) plain HTTP via the proxy (absolute-URI GETs: only the request line's ``http://host:port`` differs);
(d) HTTPS without a proxy, counted by the relay (TLS handshakes and record framing alone).

For each it prints requests, connections, the crawler's bytes, the bytes on the wire, the overhead per
request ((wire - crawler) / requests) and its share of the crawler's bytes, then the recommended
``COSTSCHED_REQUEST_OVERHEAD`` for HTTPS via a proxy with connections reused and with one per request.

    .venv/bin/python bench/overhead.py                    # 90 pages per scenario
    .venv/bin/python bench/overhead.py --pages 300 --json overhead.json
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import ipaddress
import json
import math
import os
import re
import select
import socket
import socketserver
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

HOST = "127.0.0.1"
#: Body sizes of the pages, in turn: page ``n`` has ``SIZES[n % 3]`` bytes.
SIZES = (2_000, 20_000, 100_000)
#: Seconds an idle connection (origin, proxy or relay) is kept before it is dropped.
IDLE_TIMEOUT = 30.0
#: Seconds a crawl may take before it is stopped.
CRAWL_TIMEOUT = 300.0
#: The largest request head the proxy reads.
MAX_HEAD = 65_536

SPIDER = '''
import json

import scrapy


class OverheadSpider(scrapy.Spider):
    name = "overhead"

    def __init__(self, base="", pages="90", stats_file="", **kwargs):
        super().__init__(**kwargs)
        self.base, self.pages, self.stats_file = base, int(pages), stats_file

    async def start(self):
        for number in range(self.pages):
            yield scrapy.Request(f"{self.base}/p/{number}", callback=self.parse)

    def parse(self, response):
        yield {"url": response.url, "size": len(response.body)}

    def closed(self, reason):
        stats = {k: v for k, v in self.crawler.stats.get_stats().items() if isinstance(v, (int, float, str))}
        with open(self.stats_file, "w") as f:
            json.dump(stats, f)
'''


def make_certificate(directory: Path) -> tuple[Path, Path]:
    """A throwaway self-signed certificate for 127.0.0.1 and localhost: (certificate, key) files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                     x509.IPAddress(ipaddress.ip_address(HOST))]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


def body(number: int) -> bytes:
    """Page *number*'s HTML body, of ``SIZES[number % 3]`` bytes."""
    size = SIZES[number % len(SIZES)]
    head = f"<html><head><title>Page {number}</title></head><body><h1>Page {number}</h1><p>".encode()
    tail = b"</p></body></html>"
    filler = (b"lorem ipsum dolor sit amet " * (size // 27 + 1))[: size - len(head) - len(tail)]
    return head + filler + tail


class OriginHandler(BaseHTTPRequestHandler):
    """``GET /p/<n>``: page *n* with ``Content-Length``; absolute-form targets accepted, as HTTP/1.1 requires."""

    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT
    server: OriginServer

    def setup(self) -> None:
        super().setup()
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()  # here, in the connection's thread, not in the accept loop

    def do_GET(self) -> None:
        match = re.fullmatch(r"/p/(\d+)", urlsplit(self.path).path)
        payload = body(int(match.group(1))) if match else b"not found"
        self.send_response(200 if match else 404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(payload)))
        if self.server.close_each:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        """Quiet."""


class OriginServer(ThreadingHTTPServer):
    """The origin, over TLS when given a context; with *close_each*, one request per connection."""

    request_queue_size = 64
    daemon_threads = True

    def __init__(self, context: ssl.SSLContext | None = None, *, close_each: bool = False) -> None:
        self.context = context
        self.close_each = close_each
        self.errors = 0
        super().__init__((HOST, 0), OriginHandler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = self.socket.accept()
        if self.context is not None:
            sock = self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.errors += 1


@dataclass
class Counts:
    """Bytes read from and written to the crawler's side of a proxy or relay."""

    received: int = 0
    sent: int = 0
    connections: int = 0
    tunnels: int = 0
    open: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def add(self, received: int = 0, sent: int = 0) -> None:
        with self._lock:
            self.received += received
            self.sent += sent

    def opened(self, *, tunnel: bool = False) -> None:
        with self._lock:
            self.connections += 1
            self.tunnels += tunnel
            self.open += 1

    def closed(self) -> None:
        with self._lock:
            self.open -= 1

    def reset(self) -> None:
        with self._lock:
            self.received = self.sent = self.connections = self.tunnels = 0


def relay(client: socket.socket, upstream: socket.socket, counts: Counts, stop: threading.Event) -> None:
    """Copy bytes both ways until both sides are done, counting those of *client*; idle connections end."""
    peers = {client: upstream, upstream: client}
    reading = [client, upstream]
    idle_since = time.monotonic()
    while reading and not stop.is_set() and time.monotonic() - idle_since < IDLE_TIMEOUT:
        ready, _, _ = select.select(reading, [], [], 0.5)
        for sock in ready:
            try:
                data = sock.recv(65_536)
            except OSError:
                data = b""
            peer = peers[sock]
            if not data:
                reading.remove(sock)
                with contextlib.suppress(OSError):
                    peer.shutdown(socket.SHUT_WR)
                continue
            idle_since = time.monotonic()
            if sock is client:
                counts.add(received=len(data))
            else:
                counts.add(sent=len(data))
            try:
                peer.sendall(data)
            except OSError:  # the other side is gone: what the crawler sent was still read (and billed)
                if sock is upstream:
                    reading.clear()


class ProxyHandler(socketserver.BaseRequestHandler):
    """One crawler connection: CONNECT tunnels or absolute-URI requests for the proxy, raw bytes for the relay."""

    server: CountingServer

    def handle(self) -> None:
        client: socket.socket = self.request
        counts, stop = self.server.counts, self.server.stop
        client.settimeout(IDLE_TIMEOUT)
        if self.server.upstream is not None:  # the relay
            counts.opened()
            try:
                with socket.create_connection(self.server.upstream) as upstream:
                    relay(client, upstream, counts, stop)
            finally:
                counts.closed()
            return
        head = b""
        while b"\r\n\r\n" not in head and len(head) < MAX_HEAD:
            chunk = client.recv(4096)
            if not chunk:
                return
            head += chunk
        method, target = head.split(b" ", 2)[:2]
        tunnel = method == b"CONNECT"
        counts.opened(tunnel=tunnel)
        counts.add(received=len(head))
        try:
            if tunnel:
                host, _, port = target.decode().rpartition(":")
                address = (host.strip("[]"), int(port))
            else:  # an absolute-URI request, relayed as it came: every request on it goes to this origin
                url = urlsplit(target.decode())
                address = (url.hostname or HOST, url.port or 80)
            with socket.create_connection(address) as upstream:
                if tunnel:
                    reply = b"HTTP/1.1 200 Connection established\r\n\r\n"
                    client.sendall(reply)
                    counts.add(sent=len(reply))
                    rest = head.partition(b"\r\n\r\n")[2]
                else:
                    rest = head
                if rest:
                    upstream.sendall(rest)
                relay(client, upstream, counts, stop)
        finally:
            counts.closed()


class CountingServer(socketserver.ThreadingTCPServer):
    """The forward proxy (no *upstream*) or a TCP relay to *upstream*, counting the crawler's bytes."""

    request_queue_size = 64
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, upstream: tuple[str, int] | None = None) -> None:
        self.upstream = upstream
        self.counts = Counts()
        self.stop = threading.Event()
        super().__init__((HOST, 0), ProxyHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet: a crawler dropping a connection is no error here."""

    def settle(self, timeout: float = 10.0) -> None:
        """Wait (at most *timeout* seconds) until every connection has ended and been counted."""
        deadline = time.monotonic() + timeout
        while self.counts.open > 0 and time.monotonic() < deadline:
            time.sleep(0.05)


@dataclass
class Result:
    """One scenario's figures."""

    scenario: str
    requests: int
    responses: int
    connections: int
    crawler_bytes: int
    wire_bytes: int

    @property
    def overhead(self) -> float:
        """Bytes per request the crawler did not count."""
        return (self.wire_bytes - self.crawler_bytes) / self.requests if self.requests else math.nan

    @property
    def share(self) -> float:
        """The uncounted bytes as a share of the crawler's count."""
        return (self.wire_bytes - self.crawler_bytes) / self.crawler_bytes if self.crawler_bytes else math.nan

    def line(self) -> str:
        return (f"{self.scenario:<40} requests {self.requests:>5}  connections {self.connections:>4}  "
                f"crawler {self.crawler_bytes:>11,} B  wire {self.wire_bytes:>11,} B  "
                f"overhead {self.overhead:>7.1f} B/request ({self.share:.2%})")


def crawl(workdir: Path, name: str, base: str, pages: int, proxy: str | None) -> dict[str, Any]:
    """Run ``scrapy runspider`` over *pages* pages of *base*, through *proxy* if given; its stats."""
    spider = workdir / "overhead_spider.py"
    if not spider.exists():
        spider.write_text(SPIDER)
    stats_file = workdir / f"stats-{name}.json"
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    if proxy is not None:
        env["http_proxy"] = env["https_proxy"] = proxy
    command = [
        sys.executable, "-m", "scrapy", "runspider", str(spider),
        "-a", f"base={base}", "-a", f"pages={pages}", "-a", f"stats_file={stats_file}",
        "-s", 'ADDONS={"scrapy_costsched.Addon": 0}', "-s", "COSTSCHED_BILLING=bandwidth",
        "-s", "TELNETCONSOLE_ENABLED=False", "-s", "LOG_LEVEL=WARNING",
    ]
    with open(workdir / f"log-{name}.txt", "w") as log:
        done = subprocess.run(command, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
                              timeout=CRAWL_TIMEOUT, check=False)
    if done.returncode != 0 or not stats_file.exists():
        log_text = (workdir / f"log-{name}.txt").read_text()[-3000:]
        raise RuntimeError(f"crawl {name} failed (exit {done.returncode}):\n{log_text}")
    stats: dict[str, Any] = json.loads(stats_file.read_text())
    return stats


def measure(workdir: Path, scenario: str, base: str, pages: int, counter: CountingServer,
            proxy: str | None) -> Result:
    """One scenario: the crawl, then the counter's bytes once its connections have ended."""
    counter.counts.reset()
    stats = crawl(workdir, scenario.split()[0].strip("()"), base, pages, proxy)
    counter.settle()
    counts = counter.counts
    return Result(
        scenario=scenario,
        requests=int(stats.get("downloader/request_count", 0)),
        responses=int(stats.get("downloader/response_count", 0)),
        connections=counts.connections,
        crawler_bytes=int(stats.get("costsched/bytes/sent", 0)) + int(stats.get("costsched/bytes/received", 0)),
        wire_bytes=counts.received + counts.sent,
    )


def recommend(result: Result) -> int:
    """A setting for *result*'s scenario: its overhead per request, rounded up to ten bytes."""
    return int(math.ceil(result.overhead / 10.0) * 10) if result.overhead > 0 else 0


def split_overhead(reused: Result, one_each: Result) -> tuple[float, float] | None:
    """Bytes per new tunnel and per request, from the two proxied HTTPS runs: overhead per request is
    ``tunnel * connections / requests + request`` in both (``None`` if they opened connections at one rate)."""
    if not reused.requests or not one_each.requests:
        return None
    k_reused = reused.connections / reused.requests
    k_each = one_each.connections / one_each.requests
    if abs(k_each - k_reused) < 1e-9:
        return None
    tunnel = (one_each.overhead - reused.overhead) / (k_each - k_reused)
    return tunnel, one_each.overhead - tunnel * k_each


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pages", type=int, default=90, help="pages crawled per scenario (default 90)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures to FILE")
    args = parser.parse_args(argv)
    if args.pages < 1:
        parser.error("--pages must be at least 1")

    with tempfile.TemporaryDirectory(prefix="costsched-overhead-") as tmp:
        workdir = Path(tmp)
        cert_file, key_file = make_certificate(workdir)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert_file, key_file)
        servers: list[socketserver.BaseServer] = []

        def start(server: socketserver.BaseServer) -> Any:
            servers.append(server)
            threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
            return server

        try:
            https_origin: OriginServer = start(OriginServer(context))
            closing_origin: OriginServer = start(OriginServer(context, close_each=True))
            http_origin: OriginServer = start(OriginServer())
            proxy: CountingServer = start(CountingServer())
            tls_relay: CountingServer = start(CountingServer(upstream=(HOST, https_origin.server_address[1])))
            proxy_url = f"http://{HOST}:{proxy.server_address[1]}"

            def origin(scheme: str, server: socketserver.TCPServer) -> str:
                return f"{scheme}://{HOST}:{server.server_address[1]}"

            results = [
                measure(workdir, "(a) HTTPS via proxy, connections reused", origin("https", https_origin),
                        args.pages, proxy, proxy_url),
                measure(workdir, "(b) HTTPS via proxy, one per request", origin("https", closing_origin),
                        args.pages, proxy, proxy_url),
                measure(workdir, "(c) HTTP via proxy (absolute URI)", origin("http", http_origin),
                        args.pages, proxy, proxy_url),
                measure(workdir, "(d) HTTPS direct (TLS alone, reused)", origin("https", tls_relay),
                        args.pages, tls_relay, None),
            ]
        finally:
            for server in servers:
                if isinstance(server, CountingServer):
                    server.stop.set()
                server.shutdown()
                server.server_close()

    sizes = "/".join(f"{size // 1000} kB" for size in SIZES)
    print(f"{args.pages} pages per scenario ({sizes} bodies in turn), Scrapy defaults, loopback")
    for result in results:
        print(result.line())
    reused, per_request = recommend(results[0]), recommend(results[1])
    print(f"COSTSCHED_REQUEST_OVERHEAD = {reused}   # HTTPS via a proxy, connections reused "
          f"({results[0].requests / max(results[0].connections, 1):.1f} requests per connection)")
    print(f"COSTSCHED_REQUEST_OVERHEAD = {per_request}   # HTTPS via a proxy, one connection per request")
    split = split_overhead(results[0], results[1])
    if split is not None:
        print(f"split: {split[0]:.0f} B per new tunnel (CONNECT, TLS handshake, close) + {split[1]:.0f} B per request "
              "(TLS records); at r requests per connection, set about tunnel / r + request")
    if any(r.responses != r.requests for r in results):
        print("warning: some requests got no response; see the figures above", file=sys.stderr)
    if args.json:
        payload = {
            "pages": args.pages,
            "sizes": list(SIZES),
            "scenarios": [{**asdict(r), "overhead_per_request": r.overhead, "overhead_share": r.share}
                          for r in results],
            "recommended": {"https_proxy_reused": reused, "https_proxy_one_per_request": per_request},
            "split": {"per_tunnel": split[0], "per_request": split[1]} if split is not None else None,
        }
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
