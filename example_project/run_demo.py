"""Run the scrapy-costsched demo: several simulated days, three strategies, exact true freshness.

    python example_project/run_demo.py --days 10 [--products 300] [--budget-fraction 0.5]
                                       [--hosts honour,ignore,rotate,false304,none]
                                       [--throttle INDEX:QUOTA:SECONDS[:date] | --throttle none]
                                       [--json FILE] [--workdir demo-output] [--check]

It starts the demo shop (``python -m demo_site``) on loopback, one host per validator mode of
``--hosts`` (127.0.0.1 serves the listings, products are spread over all hosts), plus by default one
more honest host that throttles (``429`` with ``Retry-After`` once it has served a few requests;
``--throttle`` names the throttling hosts instead, ``--throttle none`` turns it off). Then for each
simulated day *d* it sets the shared clock to ``T_d = EPOCH0 + (d - 1) days + 3 h`` and runs real
``scrapy crawl shop`` processes:

* **costsched**: the add-on with a fixed per-day budget of ``ceil(fraction x full-crawl pages)``
  requests (the full crawl's page count on day 1);
* **full**: plain Scrapy (``COSTSCHED_ENABLED=False``) re-crawling every listing and product;
* **random**: plain Scrapy on a random sample (seeded per day) of the existing products, as many
  as costsched sent requests that day.

Each strategy keeps a dataset (product -> last scraped copy). Its value-weighted freshness over
``[T_d, T_d+1)`` is computed exactly from the catalog's change times (see ``demo_site.evaluate``);
every scraped item is checked against what the site served. Before the next crawl starts, the driver
waits out any ``Retry-After`` block a crawl left running, so no strategy inherits another's. After
the last day a per-host table sets each host's validator mode (the server's truth) beside the
crawler's verdicts and 304 counts (``costsched/hosts/...`` stats, "-" while no component sets them)
and the bytes the server counted; a second one sets each host's throttle beside the 429s it served,
the requests that reached it while a ``Retry-After`` it had sent was running (costsched and the full
crawl side by side) and the health costsched reports. Last comes costsched's spend in bytes per day,
its own count beside the server's. The exit code is 0 even when the claims fail, unless ``--check``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Run as a script, Python puts this directory (example_project) first on sys.path.
from demo_site.catalog import DAY, EPOCH0, Catalog
from demo_site.clock import CLOCK_ENV, set_clock
from demo_site.evaluate import Dataset, freshness
from demo_site.server import VALIDATOR_MODES, Throttle, parse_throttles, product_host
from demo_site.wire import read_byte_log

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import FrameType

HERE = Path(__file__).resolve().parent
STRATEGIES = ("costsched", "full", "random")
#: One host per validator mode: the middleware that learns which validators to trust has every case.
DEFAULT_HOSTS = ",".join(VALIDATOR_MODES)
#: The crawler's per-host verdicts (stats ``costsched/hosts/<host>/<signal>``), in table order.
VERDICT_SIGNALS = ("etag", "last_modified", "not_modified")
#: The extra throttling host's default: an honest host that serves this many requests, then answers
#: 429 with a Retry-After of this many real seconds. Modest, so costsched meets a block or two a day
#: (about 1/6 of its budget lands there), short, so a day's three crawls still take seconds.
DEFAULT_THROTTLE_QUOTA = 12
DEFAULT_THROTTLE_SECONDS = 2.0
#: The server's byte-log sums per host and crawl (see wire_by_host).
WIRE_KEYS = ("requests", "bytes", "sent", "received", "conditional", "not_modified", "false_not_modified",
             "throttled", "inside_block")  # fmt: skip
#: Seconds between two requests to a host that throttles (DOWNLOAD_SLOTS), in every strategy.
POLITE_DELAY = 0.05
CRAWL_HOUR = 3 * 3600.0  # crawl a few hours into each simulated day, clear of period boundaries
CLAIMS_FROM_DAY = 4  # days 1-3 are the learning phase
VISITS_DEFINITION = (
    "visits = stats downloader/request_count - robotstxt/request_count "
    "(every HTTP request sent, retries and redirects included, except robots.txt)"
)


class DemoError(RuntimeError):
    """The demo could not run (server or crawl failure); the message says where to look."""


@dataclass
class StrategyDay:
    """One strategy's numbers for one simulated day."""

    visits: int
    requests_total: int  # downloader/request_count, robots.txt included
    spend: float
    items: int
    new: int
    changes: int
    freshness: float  # value-weighted, time-averaged over [T_d, T_d+1)
    freshness_unweighted: float
    freshness_by_tier: dict[str, float]
    dataset_size: int
    wall_seconds: float
    errors: int
    extra: dict[str, Any] = field(default_factory=dict)
    wire: dict[str, dict[str, int]] = field(default_factory=dict)  # host -> the server's byte log sums
    throttled: int = 0  # 429s the server answered this crawl
    freshness_unthrottled: float | None = None  # value-weighted, products on hosts that do not throttle
    gave_up: int = 0  # requests Scrapy's RetryMiddleware gave up on (stats retry/max_reached)
    block_wait: float = 0.0  # real seconds the driver then waited for a Retry-After block to end


# -- the demo site ----------------------------------------------------------------------------


class DemoServer:
    """``python -m demo_site`` as a subprocess; always terminated, even on errors or Ctrl-C."""

    def __init__(self, args: Sequence[str], env: dict[str, str], log: Path) -> None:
        self._log = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "demo_site", *args],
            cwd=HERE,
            env=env,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        self.url, self.hosts = self._read_url(timeout=30.0)

    def _read_url(self, timeout: float) -> tuple[str, list[tuple[str, str]]]:
        """The main URL and (mode, base URL) of every host, from the ``DEMO_SITE`` line."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if ready:
                line = self.proc.stdout.readline()
                if line.startswith("DEMO_SITE "):
                    words = line.split()
                    hosts = [(mode, url) for mode, _, url in (w.partition("=") for w in words[2:])]
                    return words[1], hosts or [("honour", words[1])]
                if not line:
                    break  # EOF: the server died
            elif self.proc.poll() is not None:
                break
        self.stop()
        raise DemoError(f"demo site did not start; see {self._log.name}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()


# -- crawls ------------------------------------------------------------------------------------


@dataclass
class CrawlResult:
    stats: dict[str, Any]
    items: list[dict[str, Any]]
    wall_seconds: float


def run_crawl(
    name: str, daydir: Path, url: str, categories: int, extra: Sequence[str], env: dict[str, str]
) -> CrawlResult:
    """One ``scrapy crawl shop`` subprocess; its stats come from the demo's stats-file extension."""
    out = daydir / f"{name}.jsonl"
    stats_file = daydir / f"{name}.stats.json"
    log = daydir / f"{name}.log"
    cmd = [
        sys.executable, "-m", "scrapy", "crawl", "shop",
        "-a", f"site={url}",
        "-a", f"categories={categories}",
        "-O", str(out),
        "-s", f"DEMO_STATS_FILE={stats_file}",
        "-s", f"LOG_FILE={log}",
        *extra,
    ]  # fmt: skip
    (daydir / f"{name}.cmd").write_text(" ".join(cmd) + "\n")
    started = time.monotonic()
    with (daydir / f"{name}.out").open("w") as console:
        rc = subprocess.run(cmd, cwd=HERE, env=env, stdout=console, stderr=subprocess.STDOUT, check=False).returncode
    wall = time.monotonic() - started
    if rc != 0 or not stats_file.exists():
        tail = _tail(daydir / f"{name}.out") or _tail(log)
        raise DemoError(f"crawl {name!r} failed (exit {rc}); see {log}\n{tail}")
    stats = json.loads(stats_file.read_text())
    items = []
    if out.exists():
        with out.open(encoding="utf-8") as fh:
            items = [json.loads(line) for line in fh if line.strip()]
    return CrawlResult(stats, items, wall)


def _tail(path: Path, lines: int = 25) -> str:
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def visits_of(stats: dict[str, Any]) -> int:
    return int(stats.get("downloader/request_count", 0)) - int(stats.get("robotstxt/request_count", 0))


def wait_out_blocks(records: Sequence[dict[str, Any]]) -> float:
    """Sleep until every Retry-After block the crawl met has ended; the seconds waited.

    Crawls run back to back, so without this the next one (another strategy, or tomorrow's costsched)
    would walk into a block it was never told about, and the server would rightly log it as inside.
    """
    ends = [float(r["blocked_until"]) for r in records if r.get("blocked_until") is not None]
    if not ends:
        return 0.0
    wait = max(ends) - time.time()
    if wait <= 0:
        return 0.0
    time.sleep(wait + 0.05)
    return wait + 0.05


# -- the demo ----------------------------------------------------------------------------------


def value_tiers() -> dict[str, float]:
    """The project's own ``COSTSCHED_VALUE_TIERS``, so the score uses the weights the crawl used."""
    from demo_shop import settings

    return {str(k): float(v) for k, v in settings.COSTSCHED_VALUE_TIERS.items()}


def crawl_env(clock_file: Path) -> dict[str, str]:
    """Environment for the site and the crawls: the shared clock, and the repo on the path."""
    env = dict(os.environ)
    env[CLOCK_ENV] = str(clock_file)
    paths = [str(HERE)]
    repo = HERE.parent
    if (repo / "scrapy_costsched").is_dir():
        paths.append(str(repo))  # use the working tree's add-on even if not installed
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.pop("DEMO_SITE_URL", None)
    return env


def run(args: argparse.Namespace, report: dict[str, Any]) -> None:
    """Run the demo, filling *report* as it goes (so a failed run still leaves its numbers)."""
    workdir = Path(args.workdir).resolve()
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    strategies = [s for s in STRATEGIES if s in args.strategies]
    weights = value_tiers()
    horizon = max(60.0, args.days + 2.0)
    catalog = Catalog.generate(products=args.products, categories=args.categories, seed=args.seed, horizon_days=horizon)
    t0 = EPOCH0 + CRAWL_HOUR
    full_pages = args.categories + len(catalog.existing(t0))
    budget = math.ceil(args.budget_fraction * full_pages)
    clock_file = workdir / "clock"
    set_clock(clock_file, t0)
    env = crawl_env(clock_file)
    state = workdir / "costsched.sqlite"
    byte_log = workdir / "bytes.jsonl"
    log_offset = 0

    print(f"scrapy-costsched demo: {args.days} days, {args.products} products, "
          f"{args.categories} categories, seed {args.seed}")  # fmt: skip
    print(f"full crawl on day 1 = {full_pages} pages ({args.categories} listings + "
          f"{full_pages - args.categories} products); costsched budget = ceil({args.budget_fraction}"
          f" x {full_pages}) = {budget} requests/day")  # fmt: skip
    hosts, throttle_specs = site_hosts(args.hosts, args.throttle)
    throttles = parse_throttles(throttle_specs, len(hosts))
    # Every strategy crawls a host known to throttle politely, one request at a time: without a delay,
    # the requests already on the wire when its 429 leaves arrive inside the pause whatever the crawler does.
    polite = ["-s", "DOWNLOAD_SLOTS=" + json.dumps({f"127.0.0.{i + 1}": {"delay": POLITE_DELAY}
                                                    for i in throttles})] if throttles else []
    print(f"hosts (validator modes, 127.0.0.1 first): {', '.join(hosts)}")
    for index, th in throttles.items():
        print(f"  host {index} (127.0.0.{index + 1}) throttles: {describe_throttle(th, long=True)}")
    print(f"value tiers: {weights}")
    print(VISITS_DEFINITION)
    print(f"workdir: {workdir}", flush=True)

    site_args = [
        "--port", "0", "--products", str(args.products), "--categories", str(args.categories),
        "--seed", str(args.seed), "--horizon-days", str(horizon),
        "--hosts", ",".join(hosts), "--byte-log", str(byte_log),
        *(arg for spec in throttle_specs for arg in ("--throttle", spec)),
    ]  # fmt: skip
    server = DemoServer(site_args, env, workdir / "server.log")
    host_urls = [url for _, url in server.hosts]
    report.update(
        {
            "params": {
                "days": args.days,
                "products": args.products,
                "categories": args.categories,
                "seed": args.seed,
                "budget_fraction": args.budget_fraction,
                "strategies": strategies,
                "throttle": throttle_specs,
            },
            "site": server.url,
            "site_hosts": [
                {"mode": mode, "url": url, "throttle": asdict(throttles[i]) if i in throttles else None}
                for i, (mode, url) in enumerate(server.hosts)
            ],
            "full_pages_day0": full_pages,
            "budget": budget,
            "value_tiers": weights,
            "visits_definition": VISITS_DEFINITION,
            "days": [],
        }
    )
    try:
        print(f"demo site: {server.url}\n", flush=True)
        print(_header(strategies), flush=True)
        datasets = {s: Dataset() for s in strategies}
        for day in range(1, args.days + 1):
            t = t0 + (day - 1) * DAY
            set_clock(clock_file, t)
            daydir = workdir / f"day{day:02d}"
            daydir.mkdir()
            existing = catalog.existing(t)
            row: dict[str, Any] = {
                "day": day,
                "t": t,
                "existing_products": len(existing),
                "full_pages": args.categories + len(existing),
            }
            sample_size = budget
            for strategy in strategies:
                if strategy == "costsched":
                    extra = ["-s", f"COSTSCHED_BUDGET={budget}", "-s", f"COSTSCHED_STATE={state}"]
                elif strategy == "full":
                    extra = ["-s", "COSTSCHED_ENABLED=False"]
                else:
                    rng = random.Random(f"random-subset/{args.seed}/{day}")
                    k = min(sample_size, len(existing))
                    chosen = sorted(p.id for p in rng.sample(existing, k))
                    urls = daydir / "random-urls.txt"
                    urls.write_text("".join(
                        f"{host_urls[product_host(pid, len(host_urls))]}/product/{pid}\n" for pid in chosen
                    ))  # fmt: skip
                    extra = ["-s", "COSTSCHED_ENABLED=False", "-a", f"urls_file={urls}"]
                result = run_crawl(strategy, daydir, server.url, args.categories, [*extra, *polite], env)
                # Crawls run one at a time and the server logs a request before answering it, so
                # the lines added since the last crawl are exactly this crawl's.
                records, log_offset = read_byte_log(byte_log, log_offset)
                block_wait = wait_out_blocks(records)
                counts = datasets[strategy].update(catalog, result.items, t)
                fresh = freshness(catalog, datasets[strategy], t, t + DAY, weights)
                calm = freshness(catalog, datasets[strategy], t, t + DAY, weights,
                                 include=lambda p: product_host(p.id, len(hosts)) not in throttles)  # fmt: skip
                visits = visits_of(result.stats)
                spend = float(result.stats.get("costsched/spent", visits)) if strategy == "costsched" else float(visits)
                if strategy == "costsched":
                    sample_size = visits
                errors = int(result.stats.get("log_count/ERROR", 0))
                row[strategy] = StrategyDay(
                    visits=visits,
                    requests_total=int(result.stats.get("downloader/request_count", 0)),
                    spend=spend,
                    items=counts.items,
                    new=counts.new,
                    changes=counts.changed,
                    freshness=fresh.weighted,
                    freshness_unweighted=fresh.unweighted,
                    freshness_by_tier=fresh.by_tier,
                    dataset_size=len(datasets[strategy].copies),
                    wall_seconds=round(result.wall_seconds, 3),
                    errors=errors,
                    extra={k: v for k, v in result.stats.items() if k.startswith("costsched/")},
                    wire=wire_by_host(records),
                    throttled=sum(r["status"] == 429 for r in records),
                    gave_up=int(result.stats.get("retry/max_reached", 0)),
                    freshness_unthrottled=calm.weighted if throttles else None,
                    block_wait=round(block_wait, 3),
                )
            print(_row(row, strategies), flush=True)
            _warn(row, strategies, daydir)
            report["days"].append({k: asdict(v) if isinstance(v, StrategyDay) else v for k, v in row.items()})
    finally:
        server.stop()
    report["hosts"] = host_table(server.hosts, report["days"], strategies, throttles)
    _print_hosts(report["hosts"], args.days, "full" in strategies)
    _print_health(report["hosts"], args.days, "full" in strategies)
    if "costsched" in strategies:
        report["bytes"] = byte_spend(report["days"])
        _print_bytes(report["bytes"])
    report["summary"] = summarize(report["days"], strategies)
    _print_summary(report["summary"])
    if "costsched" in strategies:
        report["report_html"] = str(costsched_report(state, workdir / "report.html", env))


def costsched_report(state: Path, html: Path, env: dict[str, str]) -> Path:
    """``scrapy costsched-report`` on costsched's state, as a user reads it after the last day; also as HTML."""
    print("\n$ scrapy costsched-report --html report.html\n", flush=True)
    proc = subprocess.run([sys.executable, "-m", "scrapy", "costsched-report", "-s", f"COSTSCHED_STATE={state}",
                           "--html", str(html)], cwd=HERE, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise DemoError(f"scrapy costsched-report failed: {proc.stderr.strip()[-2000:]}")
    print(proc.stdout, flush=True)
    print(f"HTML report with charts: {html}", flush=True)
    return html


def _header(strategies: Sequence[str]) -> str:
    parts = ["day"]
    if "costsched" in strategies:
        parts.append("| costsched visits chg  spend fresh")
    if "full" in strategies:
        parts.append("| full visits chg fresh")
    if "random" in strategies:
        parts.append("| random visits chg fresh")
    return " ".join(parts)


def _row(row: dict[str, Any], strategies: Sequence[str]) -> str:
    parts = [f"{row['day']:>3}"]
    for s in strategies:
        r: StrategyDay = row[s]
        if s == "costsched":
            parts.append(f"|           {r.visits:>6} {r.changes:>3} {r.spend:>6g} {r.freshness:.3f}")
        elif s == "full":
            parts.append(f"|      {r.visits:>6} {r.changes:>3} {r.freshness:.3f}")
        else:
            parts.append(f"|        {r.visits:>6} {r.changes:>3} {r.freshness:.3f}")
    return " ".join(parts)


def pages_reached(r: StrategyDay) -> int:
    """Distinct pages a plain-Scrapy crawl got an answer other than 429 for, or gave up on.

    Every 429 is retried (visits - throttled pages answered) unless RetryMiddleware gave up on it.
    """
    return r.visits - r.throttled + r.gave_up


def _warn(row: dict[str, Any], strategies: Sequence[str], daydir: Path) -> None:
    for s in strategies:
        r: StrategyDay = row[s]
        # plain Scrapy logs an ERROR for each request it gave up retrying: a throttled page, expected
        errors = r.errors - (r.gave_up if s != "costsched" else 0)
        if errors:
            print(f"    warning: {s} logged {errors} errors; see {daydir / (s + '.log')}")
    if "full" in strategies and pages_reached(row["full"]) != row["full_pages"]:
        print(f"    warning: full crawl requested {pages_reached(row['full'])} pages "
              f"({row['full'].visits} visits, {row['full'].throttled} answered 429), "
              f"the site has {row['full_pages']} pages")  # fmt: skip


def wire_by_host(records: Sequence[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Sum the server's byte log per host: requests, bytes both ways, 304s, false 304s, 429s, and the
    requests that arrived while a Retry-After the host had sent was running."""
    hosts: dict[str, dict[str, int]] = {}
    for r in records:
        h = hosts.setdefault(r["host"], dict.fromkeys(WIRE_KEYS, 0))
        h["requests"] += 1
        h["sent"] += int(r["sent"])
        h["received"] += int(r["received"])
        h["bytes"] += int(r["received"]) + int(r["sent"])
        h["conditional"] += bool(r["conditional"])
        if r["status"] == 304:
            h["not_modified"] += 1
            h["false_not_modified"] += r["changed_since_validators"] is True
        h["throttled"] += r["status"] == 429
        h["inside_block"] += bool(r.get("inside_block"))
    return hosts


def _host_stat(stats: dict[str, Any], key: str, url: str) -> Any:
    """``key`` formatted with the host as the crawler may name it: bare address, or with the port."""
    netloc = url.split("://", 1)[-1]
    for name in (netloc.rsplit(":", 1)[0], netloc):
        if (value := stats.get(key.format(host=name))) is not None:
            return value
    return None


def _host_sum(days: list[dict[str, Any]], key: str, url: str) -> int | None:
    """A per-run costsched counter summed over the days, None when no day's crawl set it."""
    counts = [c for d in days if (c := _host_stat(d["costsched"]["extra"], key, url)) is not None]
    return sum(int(c) for c in counts) if counts else None


def host_table(hosts: Sequence[tuple[str, str]], days: list[dict[str, Any]], strategies: Sequence[str],
               throttles: dict[int, Throttle] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """One row per host: mode, throttle, the costsched crawler's last verdicts, 304 count and health,
    and the server's byte log sums per strategy."""
    throttles = throttles or {}
    rows = []
    for index, (mode, url) in enumerate(hosts):
        address = url.split("://", 1)[-1].rsplit(":", 1)[0]
        th = throttles.get(index)
        row: dict[str, Any] = {"host": address, "url": url, "mode": mode, "throttle": asdict(th) if th else None}
        if "costsched" in strategies and days:
            last = days[-1]["costsched"]["extra"]
            row["verdicts"] = {s: _host_stat(last, "costsched/hosts/{host}/" + s, url) for s in VERDICT_SIGNALS}
            row["not_modified_count"] = _host_sum(days, "costsched/not_modified/{host}", url)
            row["health"] = _host_stat(last, "costsched/hosts/{host}/health", url)  # as of the last day
            row["retry_after_obeyed"] = _host_sum(days, "costsched/hosts/{host}/retry_after", url)
            row["held"] = _host_sum(days, "costsched/hosts/{host}/held", url)
        for strategy in strategies:
            wire = [d[strategy]["wire"].get(address, {}) for d in days]
            row[strategy] = {k: sum(w.get(k, 0) for w in wire) for k in WIRE_KEYS}
        rows.append(row)
    return rows


def _print_hosts(rows: list[dict[str, Any]], n_days: int, with_full: bool) -> None:
    if not rows or "verdicts" not in rows[0]:
        return
    print(f"\nper host, costsched over {n_days} days (verdicts as of the last day; 304s: the crawler's count / "
          "the server's / false ones; sent, received: the server's bytes):")  # fmt: skip
    head = (f"{'host':<11} {'mode':<9} {'etag':<9} {'last_mod':<9} {'304':<9} {'304s':>13} {'sent':>9} "
            f"{'received':>8}")  # fmt: skip
    print(head + (f" {'full bytes':>10}" if with_full else ""))
    for r in rows:
        cs = r["costsched"]
        verdicts = " ".join(f"{_dash(r['verdicts'][s]):<9}" for s in VERDICT_SIGNALS)
        counts = f"{_dash(r['not_modified_count'])}/{cs['not_modified']}/{cs['false_not_modified']}"
        line = f"{r['host']:<11} {r['mode']:<9} {verdicts} {counts:>13} {cs['sent']:>9} {cs['received']:>8}"
        print(line + (f" {r['full']['bytes']:>10}" if with_full else ""), flush=True)


def _print_health(rows: list[dict[str, Any]], n_days: int, with_full: bool) -> None:
    if not rows or "verdicts" not in rows[0]:
        return
    side = "costsched/full" if with_full else "costsched"
    print(f"\nper host, throttling and health over {n_days} days (429s: the server's, {side}; inside: requests "
          f"that reached the host while a Retry-After it had sent was running, {side}; health: costsched's "
          "P(success) of an attempt as of the last day; obeyed: Retry-After blocks costsched obeyed; held: "
          "requests it held back for one):")  # fmt: skip
    print(f"{'host':<11} {'throttle':<9} {'429s':>9} {'inside':>9} {'health':>7} {'obeyed':>7} {'held':>6}")
    for r in rows:
        sides = [r["costsched"], r["full"]] if with_full else [r["costsched"]]
        throttled, inside = ("/".join(str(side[k]) for side in sides) for k in ("throttled", "inside_block"))
        health = r["health"] if r["health"] is None else f"{float(r['health']):.3f}"
        print(f"{r['host']:<11} {describe_throttle(r['throttle']):<9} {throttled:>9} {inside:>9} "
              f"{_dash(health):>7} {_dash(r['retry_after_obeyed']):>7} {_dash(r['held']):>6}", flush=True)  # fmt: skip


def describe_throttle(th: Throttle | dict[str, Any] | None, long: bool = False) -> str:
    """``12/2s`` (quota / Retry-After; ``12/2s date`` for the date form), ``-`` for a host that never throttles."""
    if th is None:
        return "-"
    t = th if isinstance(th, Throttle) else Throttle(**th)
    if long:
        form = "an HTTP-date" if t.as_date else "seconds"
        return (f"{t.quota} requests a simulated day, then 429 for {t.retry_after:g} real seconds "
                f"(Retry-After in {form}), {t.quota} more, ...")  # fmt: skip
    return f"{t.quota}/{t.retry_after:g}s" + (" date" if t.as_date else "")


def byte_spend(days: list[dict[str, Any]]) -> dict[str, Any]:
    """costsched's bytes per day as it counts them (stats costsched/bytes/*) and as the server does."""
    rows = []
    for d in days:
        extra = d["costsched"]["extra"]
        crawler = int(extra.get("costsched/bytes/sent", 0)) + int(extra.get("costsched/bytes/received", 0))
        server = sum(int(w.get("bytes", 0)) for w in d["costsched"]["wire"].values())
        rows.append({"day": d["day"], "crawler": crawler, "server": server, "diff_pct": _pct(crawler, server)})
    crawler_total = sum(r["crawler"] for r in rows)
    server_total = sum(r["server"] for r in rows)
    return {"days": rows, "crawler": crawler_total, "server": server_total,
            "diff_pct": _pct(crawler_total, server_total)}  # fmt: skip


def _pct(crawler: int, server: int) -> float | None:
    return round(100.0 * (crawler - server) / server, 4) if server else None


def _print_bytes(spend: dict[str, Any]) -> None:
    print("\ncostsched spend in bytes (crawler: stats costsched/bytes/sent + received; server: its byte log "
          "for the costsched crawl, robots.txt included; diff: (crawler - server) / server):")  # fmt: skip
    print(f"{'day':>5} {'crawler':>10} {'server':>10} {'diff':>8}")
    for r in [*spend["days"], {"day": "total", **spend}]:
        diff = "-" if r["diff_pct"] is None else f"{r['diff_pct']:+.3f}%"
        print(f"{r['day']:>5} {r['crawler']:>10} {r['server']:>10} {diff:>8}", flush=True)


def _dash(value: Any) -> str:
    return "-" if value is None else str(value)


def summarize(days: list[dict[str, Any]], strategies: Sequence[str]) -> dict[str, Any]:
    """The claims, from day CLAIMS_FROM_DAY on: beats random every day; >= 90% of full at <= 50%."""
    later = [d for d in days if d["day"] >= CLAIMS_FROM_DAY]
    summary: dict[str, Any] = {"from_day": CLAIMS_FROM_DAY, "days_evaluated": len(later)}
    if not later or "costsched" not in strategies:
        summary["evaluated"] = False
        summary["passed"] = False
        return summary
    summary["evaluated"] = True
    passed = True
    cs = [d["costsched"] for d in later]
    summary["mean_freshness"] = {s: sum(d[s]["freshness"] for d in later) / len(later) for s in strategies}
    if "random" in strategies:
        margins = [c["freshness"] - d["random"]["freshness"] for c, d in zip(cs, later, strict=True)]
        summary["beats_random_every_day"] = all(m > 0 for m in margins)
        summary["freshness_minus_random"] = margins
        passed &= summary["beats_random_every_day"]
    if "full" in strategies:
        fresh_ratio = [c["freshness"] / d["full"]["freshness"] for c, d in zip(cs, later, strict=True)]
        visit_ratio = [c["visits"] / d["full"]["visits"] for c, d in zip(cs, later, strict=True)]
        summary["freshness_ratio_to_full"] = fresh_ratio
        summary["visits_ratio_to_full"] = visit_ratio
        summary["within_10pct_of_full_every_day"] = all(r >= 0.9 for r in fresh_ratio)
        if all(d[s]["freshness_unthrottled"] is not None for d in later for s in ("costsched", "full")):
            # Not a claim: plain Scrapy loses pages to a throttling host, which flatters the ratio above.
            summary["freshness_ratio_to_full_unthrottled_hosts"] = [
                d["costsched"]["freshness_unthrottled"] / d["full"]["freshness_unthrottled"] for d in later
            ]
        summary["at_most_half_the_requests_every_day"] = all(r <= 0.5 for r in visit_ratio)
        passed &= summary["within_10pct_of_full_every_day"]
        passed &= summary["at_most_half_the_requests_every_day"]
    summary["passed"] = bool(passed)
    return summary


def _print_summary(s: dict[str, Any]) -> None:
    print()
    if not s["evaluated"]:
        print(f"claims not evaluated: need costsched and --days >= {s['from_day'] + 1}")
        return
    print(f"summary, days {s['from_day']}..{s['from_day'] + s['days_evaluated'] - 1}:")
    means = ", ".join(f"{k} {v:.3f}" for k, v in s["mean_freshness"].items())
    print(f"  mean value-weighted freshness: {means}")
    if "beats_random_every_day" in s:
        margins = " ".join(f"{m:+.3f}" for m in s["freshness_minus_random"])
        print(f"  costsched beats random every day: {_yes(s['beats_random_every_day'])}"
              f"   (freshness minus random: {margins})")  # fmt: skip
    if "freshness_ratio_to_full" in s:
        fr = " ".join(f"{r:.3f}" for r in s["freshness_ratio_to_full"])
        vr = " ".join(f"{r:.3f}" for r in s["visits_ratio_to_full"])
        print(f"  freshness within 10% of full every day: "
              f"{_yes(s['within_10pct_of_full_every_day'])}   (costsched/full: {fr})")  # fmt: skip
        if "freshness_ratio_to_full_unthrottled_hosts" in s:
            calm = " ".join(f"{r:.3f}" for r in s["freshness_ratio_to_full_unthrottled_hosts"])
            print(f"    (not a claim) the same on the hosts that do not throttle, where plain Scrapy loses "
                  f"no pages: {calm}")  # fmt: skip
        print(f"  at most half the full crawl's requests every day: "
              f"{_yes(s['at_most_half_the_requests_every_day'])}   (costsched/full: {vr})")  # fmt: skip
    print(f"  all claims hold: {_yes(s['passed'])}", flush=True)


def _yes(flag: bool) -> str:
    return "YES" if flag else "NO"


# -- entry point -------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--days", type=int, default=10, help="simulated days (default 10)")
    p.add_argument("--products", type=int, default=300, help="products on day 1 (default 300)")
    p.add_argument("--categories", type=int, default=10, help="category listings (default 10)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--budget-fraction", type=float, default=0.5,
        help="costsched budget as a share of the day-0 full crawl (default 0.5)",
    )  # fmt: skip
    p.add_argument(
        "--hosts", default=DEFAULT_HOSTS,
        help=f"validator mode of each demo host, main host first (default {DEFAULT_HOSTS}; "
             "'honour' alone is the single honest host)",
    )  # fmt: skip
    p.add_argument(
        "--throttle", action="append", metavar="INDEX:QUOTA:SECONDS[:date]",
        help="host INDEX of --hosts throttles: 429 + Retry-After SECONDS (real time) after QUOTA requests "
             "(repeatable; passed to python -m demo_site). Default: one more honour host, "
             f"{DEFAULT_THROTTLE_QUOTA}:{DEFAULT_THROTTLE_SECONDS:g}; 'none': no throttling host",
    )  # fmt: skip
    p.add_argument("--json", metavar="FILE", help="write every per-day number as one JSON object")
    p.add_argument("--workdir", default="demo-output", help="scratch dir, wiped at start")
    p.add_argument("--check", action="store_true", help="exit 1 when a claim fails")
    p.add_argument(
        "--strategies", default=",".join(STRATEGIES),
        help="comma-separated subset of costsched,full,random (random alone samples the budget)",
    )  # fmt: skip
    return p


def site_hosts(hosts: str, throttle: Sequence[str] | None) -> tuple[list[str], list[str]]:
    """The site's host specs and ``--throttle`` specs: by default one more honour host, throttling."""
    specs = [h.strip() for h in hosts.split(",") if h.strip()]
    if throttle is None:
        spec = f"{len(specs)}:{DEFAULT_THROTTLE_QUOTA}:{DEFAULT_THROTTLE_SECONDS:g}"
        return [*specs, "honour"], [spec]
    if [t.strip().lower() for t in throttle] == ["none"]:
        return specs, []
    return specs, [t.strip() for t in throttle]


def _sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwind, so the server is stopped in `finally`


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = set(args.strategies) - set(STRATEGIES)
    if unknown or not args.strategies:
        build_parser().error(f"--strategies: unknown {sorted(unknown)}; choose from {STRATEGIES}")
    if args.days < 1 or args.products < 1 or args.categories < 1:
        build_parser().error("--days, --products and --categories must be >= 1")
    if not 0 < args.budget_fraction <= 1:
        build_parser().error("--budget-fraction must be in (0, 1]")
    hosts = [h.strip().partition(":")[0] for h in args.hosts.split(",") if h.strip()]
    if not hosts or set(hosts) - set(VALIDATOR_MODES):
        build_parser().error(f"--hosts: choose modes from {','.join(VALIDATOR_MODES)}, not {args.hosts!r}")
    try:
        site, throttle = site_hosts(args.hosts, args.throttle)
        parse_throttles(throttle, len(site))
    except ValueError as exc:
        build_parser().error(f"--throttle: {exc}")
    signal.signal(signal.SIGTERM, _sigterm)
    report: dict[str, Any] = {}
    try:
        run(args, report)
    except DemoError as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        report["error"] = str(exc)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        report["error"] = "interrupted"
        return 130
    except SystemExit as exc:  # SIGTERM, via _sigterm
        print("terminated", file=sys.stderr)
        report["error"] = "terminated"
        return int(exc.code or 1)
    finally:
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    if args.check and not report["summary"]["passed"]:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
