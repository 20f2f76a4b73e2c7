"""Memory and time of a real budgeted crawl whose state knows N pages, against plain Scrapy on the same site.

Serves a generated site of N pages on 127.0.0.1 (``bench/scale_site.py``, its own
process), seeds a state that knows all N pages with a few visits of history each
(written through the library, keyed by Scrapy's default request fingerprinter as the
crawl keys them), then runs ``scrapy runspider bench/scale_spider.py`` in pairs:
with the add-on and ``COSTSCHED_BUDGET``, from a fresh copy of the seeded state, and
with ``COSTSCHED_ENABLED=False`` starting from the URLs that run visited and dropping
every other link at the scheduler (same spider, same requests yielded and sent).
Each crawl is its own process and reports its own peak RSS and garbage-collection
time; its wall time is the driver's clock from spawn to exit. Prints the figures
the scale bars are about (issue 8):

* peak RSS per known page above the plain run (bar: under 1 KiB),
* time to open the state and plan (``costsched/open_seconds`` + ``costsched/plan_seconds``;
  bar: under 10 s), and the wall time from spawning the crawl to its first request,
* the add-on's wall-time overhead against the plain run, median over the pairs (bar: under 10%),
  and its CPU-time overhead (user + system time of the crawl process), which other work on the
  machine disturbs less than the wall time; and the CPU time the hypervisor gave other guests
  during each crawl, which tells a pair the host disturbed.

    python bench/crawl_scale.py                      # 200,000 known pages, budget 5000, 3 pairs
    python bench/crawl_scale.py --pages 20000 --repeat 1 --json out.json
    python bench/crawl_scale.py --repeat 1 --profile prof/   # cProfile of each crawl (its times are not the bars')
    python bench/crawl_scale.py --latency 0.05       # each answer 50 ms late, as across a network

The bars are judged on the local site as it is, answering at once, where the crawl is bound by
its CPU and every instruction the add-on adds is wall time. ``--latency`` shows what a crawl of a
site across a network sees instead (the overhead is printed without a verdict).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import scrapy
from scrapy.settings import Settings
from scrapy.utils.misc import load_object

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.scale_site import item, page
from bench.scale_spider import PAGE_TYPE, ScaleSpider
from scrapy_costsched.model import ChangeStats, RateEstimate, RatePrior, estimate_rate
from scrapy_costsched.model.discovery import NewLinkStats
from scrapy_costsched.pages import MeanBytes, PageState, make_template
from scrapy_costsched.records import RecordHasher, record_hash
from scrapy_costsched.storage import SqliteDictStorage

SPIDER = ROOT / "bench" / "scale_spider.py"
SITE = ROOT / "bench" / "scale_site.py"
DAY = 86400.0
#: Distinct visit histories the seeded pages cycle through (each with its own rate estimate).
HISTORIES = 16
#: One seeded page in this many has a stale record, so its visit is a change.
STALE_EVERY = 4
#: Seeded pages per commit.
SEED_BATCH = 10_000
#: No crawl may take longer than this (a hung crawl is killed and reported).
CRAWL_TIMEOUT = 1800.0
BARS = {"bytes_per_page": 1024.0, "open_plan_seconds": 10.0, "overhead": 0.10}


def _histories() -> list[tuple[ChangeStats, RateEstimate]]:
    """Visit histories from rarely to often changing pages: a few visits days apart, and their estimates."""
    out = []
    for k in range(HISTORIES):
        rate = math.exp(math.log(0.01) + k * (math.log(5.0) - math.log(0.01)) / (HISTORIES - 1))
        stats = ChangeStats()
        for v in range(3 + k % 5):
            interval = 1.0 + (k + v) % 7
            stats.add(interval, changed=(v * 0.618 + k * 0.31) % 1.0 < -math.expm1(-rate * interval))
        out.append((stats, estimate_rate(stats, RatePrior())))
    return out


def seed_state(path: Path, site: str, pages: int, now: float, sizes: float | None = None, hubs: bool = False) -> None:
    """Write a state that knows pages 0..pages-1 of *site*, as earlier runs of the spider would have left it;
    with *sizes*, each page with a mean full fetch of its own, within a tenth of that many bytes (as byte billing
    measures them); with *hubs*, each page with a history of the new links it showed (one in five a few a day,
    the others few a week), as when the spider follows every page's links."""
    spider = ScaleSpider(site=site)
    fingerprinter_cls = load_object(Settings().get("REQUEST_FINGERPRINTER_CLASS"))
    fingerprinter = fingerprinter_cls()
    hasher = RecordHasher({}, {}, {})
    histories = _histories()
    templates: dict[str, dict[str, Any]] = {}
    store = SqliteDictStorage(path)
    store.open()
    try:
        # What Tracker.open writes on a first run (SqliteDictStorage.open wrote the schema).
        store.set_meta("fingerprinter", f"{fingerprinter_cls.__module__}.{fingerprinter_cls.__qualname__}")
        for i in range(pages):
            p = page(i, pages)
            url = f"{site}/p/{i}"
            if p.tier not in templates:
                request = scrapy.Request(url, callback=spider.parse_page, meta={**spider.meta_for(p.tier), "depth": 1})
                template = make_template(request, spider)
                assert template is not None
                templates[p.tier] = template
            template = {**templates[p.tier], "url": url}
            item_hash = hasher.item_hash(item(url, p)) if i % STALE_EVERY else f"{i:016x}"
            stats, estimate = histories[i % HISTORIES]  # shared: each page is encoded at once
            last_visit = now - (1 + i % 14) * DAY - (i % 24) * 3600.0
            state = PageState(
                url=url, host="127.0.0.1", page_type=PAGE_TYPE, value=p.tier, first_seen=now - 90 * DAY,
                template=template, last_visit=last_visit, last_attempt=last_visit,
                record=record_hash([item_hash]), record_kind="items", item_hashes=[item_hash],
                hash_config=hasher.config_id, stats=stats, estimate=estimate,
                visits=round(stats.visits), changes=round(sum(stats.changed.values())),
                full_bytes=None if sizes is None else MeanBytes(sizes * (0.9 + 0.2 * (i % 101) / 100), 3),
                links=NewLinkStats(0.5 + 20.0 * (i % 5 == 0), 10.0, 3) if hubs else None)
            key = fingerprinter.fingerprint(scrapy.Request(url)).hex()
            store.put_page(key, state.to_json(), state.summary())
            if i % SEED_BATCH == SEED_BATCH - 1:
                store.commit()  # sqlitedict queues writes for its thread: keep the queue short
        store.commit()
    finally:
        store.close()


def copy_state(seed: Path, state: Path) -> None:
    """*seed* copied to *state* as a run that closed it would have left it (so the crawl's open finds
    the clean-close stamp a daily crawl finds, rather than a file nothing vouches for)."""
    shutil.copyfile(seed, state)
    store = SqliteDictStorage(state)
    store.open()
    store.close()


@dataclass
class Crawl:
    """One crawl process: what the driver measured and what the crawl reported."""

    mode: str
    wall_seconds: float
    cpu_seconds: float
    """User + system time of the crawl process, spawn to exit."""
    peak_rss: int
    first_request_seconds: float | None
    crawl_seconds: float | None
    gc_full_seconds: float
    """Time in the cyclic collector's full (generation 2) collections, which scan every object the crawl keeps."""
    steal_seconds: float | None
    """CPU time the hypervisor gave other guests while the crawl ran (all CPUs; Linux's ``steal``): on a shared
    machine, what tells a pair the host disturbed from one the add-on slowed."""
    stats: dict[str, Any]
    log: str

    def stat(self, name: str) -> Any:
        return self.stats.get(name)


def steal_seconds() -> float | None:
    """The machine's stolen CPU time so far, in seconds (``None`` where ``/proc/stat`` does not say)."""
    try:
        fields = Path("/proc/stat").read_text(encoding="ascii").splitlines()[0].split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def run_crawl(mode: str, workdir: Path, site: str, budget: float, state: Path, urls: Path | None,
              tag: str, profile: Path | None = None) -> Crawl:
    """One ``scrapy runspider`` in its own process; its peak RSS as the crawl itself reported it.

    With *profile* (a directory), the crawl runs under cProfile and leaves ``<tag>.prof`` there.
    """
    stats_file, visited, log = workdir / f"{tag}.stats.json", workdir / f"{tag}.visited", workdir / f"{tag}.log"
    stats_file.unlink(missing_ok=True)
    profiler = ["-m", "cProfile", "-o", str(profile.resolve() / f"{tag}.prof")] if profile is not None else []
    cmd = [sys.executable, *profiler, "-m", "scrapy", "runspider", str(SPIDER), "-a", f"site={site}", "-a", f"visited={visited}",
           "-s", f"BENCH_STATS_FILE={stats_file}", "-s", f"COSTSCHED_STATE={state}", "-s", f"COSTSCHED_BUDGET={budget:g}"]
    if mode == "plain":
        assert urls is not None
        cmd += ["-s", "COSTSCHED_ENABLED=False", "-a", f"urls_file={urls}", "-s", f"BENCH_URLS_FILE={urls}",
                "-s", "DUPEFILTER_CLASS=bench.scale_spider.ListedOnlyDupeFilter"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    with log.open("wb") as out:
        # Children's times count once they are reaped: the site server is reaped only at the end.
        before, stolen = resource.getrusage(resource.RUSAGE_CHILDREN), steal_seconds()
        spawned, started = time.time(), time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        try:
            proc.wait(timeout=CRAWL_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        wall = time.perf_counter() - started
        after, stolen_after = resource.getrusage(resource.RUSAGE_CHILDREN), steal_seconds()
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    text = log.read_text(encoding="utf-8", errors="replace")
    if proc.returncode != 0 or not stats_file.exists():
        raise RuntimeError(f"{mode} crawl failed (exit {proc.returncode}); its log, {log}, ends:\n{text[-3000:]}")
    report = json.loads(stats_file.read_text(encoding="utf-8"))
    times = report["times"]
    first = times.get("first_request")
    return Crawl(mode, wall, cpu, round(times["peak_rss"]),
                 first - spawned if first else None,
                 times["closed"] - first if first else None, times["gc2_seconds"],
                 None if stolen is None or stolen_after is None else stolen_after - stolen, report["stats"], str(log))


def start_site(pages: int, latency: float = 0.0) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, str(SITE), "--pages", str(pages), "--latency", str(latency)],
                            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    if len(line) != 2 or line[0] != "SITE":
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the scale site did not start (said {line!r})")
    return proc, line[1]


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def summarise(pages: int, budget: float, seed_seconds: float, state_bytes: int,
              pairs: list[tuple[Crawl, Crawl]], latency: float = 0.0) -> dict[str, Any]:
    """Medians over the pairs, the bars, and the raw figures of every crawl."""
    addon = [a for a, _ in pairs]
    plain = [p for _, p in pairs]
    open_s = _median([a.stat("costsched/open_seconds") for a in addon])
    plan_s = _median([a.stat("costsched/plan_seconds") for a in addon])
    rss_addon = statistics.median(a.peak_rss for a in addon)
    rss_plain = statistics.median(p.peak_rss for p in plain)
    overheads = [a.wall_seconds / p.wall_seconds - 1.0 for a, p in pairs]
    overhead = statistics.median(overheads)
    cpu_overhead = statistics.median(a.cpu_seconds / p.cpu_seconds - 1.0 for a, p in pairs)
    crawl_overhead = _median([a.crawl_seconds / p.crawl_seconds - 1.0 if a.crawl_seconds and p.crawl_seconds else None
                              for a, p in pairs])
    result: dict[str, Any] = {
        "pages": pages,
        "budget": budget,
        "pairs": len(pairs),
        "seed_seconds": round(seed_seconds, 2),
        "state_mb": round(state_bytes / 1e6, 1),
        "bytes_per_page": round((rss_addon - rss_plain) / pages, 1),
        "open_seconds": open_s,
        "plan_seconds": plan_s,
        "open_plan_seconds": None if open_s is None or plan_s is None else open_s + plan_s,
        "overhead": round(overhead, 4),
        "pair_overheads": [round(o, 4) for o in overheads],
        "cpu_overhead": round(cpu_overhead, 4),
        "crawl_phase_overhead": None if crawl_overhead is None else round(crawl_overhead, 4),
        "crawls": [{k: v for k, v in asdict(c).items() if k != "stats"} | {
            "visits": c.stat("costsched/visits"),
            "requests": c.stat("downloader/request_count"),
            "responses": c.stat("response_received_count"),
            "items": c.stat("item_scraped_count"),
            "known_pages": c.stat("costsched/plan/known_pages"),
            "planned": c.stat("costsched/plan/planned"),
            "discovery_deferred": c.stat("costsched/skipped/discovery_deferred"),
            "not_planned": c.stat("costsched/skipped/not_planned"),
            "open_seconds": c.stat("costsched/open_seconds"),
            "plan_seconds": c.stat("costsched/plan_seconds"),
        } for pair in pairs for c in pair],
    }
    result["holds"] = {bar: result[bar] is not None and result[bar] < limit for bar, limit in BARS.items()}
    result["latency"] = latency
    if latency > 0.0:
        result["holds"]["overhead"] = None  # judged on the site answering at once
    for mode, crawls in (("plain", plain), ("costsched", addon)):
        result[mode] = {
            "wall_seconds": statistics.median(c.wall_seconds for c in crawls),
            "cpu_seconds": statistics.median(c.cpu_seconds for c in crawls),
            "crawl_seconds": _median([c.crawl_seconds for c in crawls]),
            "first_request_seconds": _median([c.first_request_seconds for c in crawls]),
            "peak_rss_mb": statistics.median(c.peak_rss for c in crawls) / 2**20,
            "gc_full_seconds": statistics.median(c.gc_full_seconds for c in crawls),
            "responses": statistics.median(c.stat("response_received_count") or 0 for c in crawls),
        }
    return result


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def print_table(r: dict[str, Any]) -> None:
    p, a = r["plain"], r["costsched"]
    ok = {bar: "holds" if held else "MISSED" for bar, held in r["holds"].items()}
    late = f", each answer {r['latency'] * 1000:g} ms late" if r["latency"] else ""
    print(f"crawl_scale: {r['pages']:,} known pages, budget {r['budget']:g}, median of {r['pairs']} pair(s){late}; "
          f"seeded in {r['seed_seconds']:.1f} s, state {r['state_mb']:.0f} MB")
    print(f"{'':34}{'plain':>12}{'costsched':>12}")
    for label, key, spec in (("responses", "responses", ",.0f"), ("wall time, spawn to exit [s]", "wall_seconds", ".2f"),
                             ("CPU time, spawn to exit [s]", "cpu_seconds", ".2f"),
                             ("spawn to first request [s]", "first_request_seconds", ".2f"),
                             ("first request to close [s]", "crawl_seconds", ".2f"),
                             ("full GC collections [s]", "gc_full_seconds", ".2f"),
                             ("peak RSS [MiB]", "peak_rss_mb", ".1f")):
        print(f"{label:34}{_fmt(p[key], spec):>12}{_fmt(a[key], spec):>12}")
    print(f"peak RSS above plain per known page: {r['bytes_per_page']:.0f} bytes "
          f"(bar < 1024: {ok['bytes_per_page']})")
    print(f"open + plan: {_fmt(r['open_seconds'], '.2f')} + {_fmt(r['plan_seconds'], '.2f')} = "
          f"{_fmt(r['open_plan_seconds'], '.2f')} s (bar < 10 s: {ok['open_plan_seconds']})")
    crawl = r["crawl_phase_overhead"]
    verdict = f"bar < 10%: {ok['overhead']}" if r["holds"]["overhead"] is not None else \
        "the bar is judged without --latency"
    print(f"wall-time overhead: {r['overhead']:+.1%} ({verdict}); "
          f"first request to close: {'n/a' if crawl is None else format(crawl, '+.1%')}; "
          f"CPU time: {r['cpu_overhead']:+.1%}")
    if len(r["pair_overheads"]) > 1:
        print("each pair's wall-time overhead: " + ", ".join(format(o, "+.1%") for o in r["pair_overheads"]))
    stolen = [(c["mode"], c["steal_seconds"]) for c in r["crawls"]]
    if any(seconds for _, seconds in stolen):
        print("CPU time stolen by other guests during each crawl [s]: " + ", ".join(
            f"{mode} {_fmt(seconds, '.2f')}" for mode, seconds in stolen))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=200_000, help="known pages in the state (default 200000)")
    parser.add_argument("--budget", type=float, default=5000, help="COSTSCHED_BUDGET: visits of the run (default 5000)")
    parser.add_argument("--repeat", type=int, default=3, help="pairs of crawls, alternating which goes first")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON ('-' for stdout only)")
    parser.add_argument("--workdir", help="keep states, logs and stats here (default: a temporary directory)")
    parser.add_argument("--latency", type=float, default=0.0,
                        help="seconds the site waits before each answer (default 0: the bars' set-up)")
    parser.add_argument("--profile", metavar="DIR", type=Path,
                        help="run each crawl under cProfile, leaving <mode>-<pair>.prof in DIR (slows the crawls)")
    args = parser.parse_args()
    if args.pages < 2 or args.budget <= 0 or args.repeat < 1 or not 0.0 <= args.latency <= 10.0:
        parser.error("--pages must be at least 2, --budget positive, --repeat at least 1, --latency 0 to 10 s")
    if args.workdir:
        workdir = Path(args.workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        tmp = None
    else:
        tmp = tempfile.TemporaryDirectory(prefix="crawl_scale-")
        workdir = Path(tmp.name)
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    site_proc, site = start_site(args.pages, args.latency)
    try:
        seed, state = workdir / "seed.sqlite", workdir / "state.sqlite"
        seed.unlink(missing_ok=True)
        started = time.perf_counter()
        seed_state(seed, site, args.pages, time.time())
        seed_seconds = time.perf_counter() - started
        pairs: list[tuple[Crawl, Crawl]] = []
        urls: Path | None = None
        for r in range(args.repeat):
            crawls: dict[str, Crawl] = {}
            # Alternate which goes first (the first pair must start with the add-on: it picks the URLs).
            for mode in ("costsched", "plain") if r % 2 == 0 else ("plain", "costsched"):
                if mode == "costsched":
                    copy_state(seed, state)
                crawls[mode] = run_crawl(mode, workdir, site, args.budget, state, urls, f"{mode}-{r}", args.profile)
                if mode == "costsched":
                    urls = workdir / f"{mode}-{r}.visited"
            pairs.append((crawls["costsched"], crawls["plain"]))
            print(f"pair {r + 1}/{args.repeat}: " + ", ".join(
                f"{mode} {crawl.wall_seconds:.2f} s (CPU {crawl.cpu_seconds:.2f} s, "
                f"stolen {_fmt(crawl.steal_seconds, '.2f')} s)"
                for mode, crawl in (("costsched", crawls["costsched"]), ("plain", crawls["plain"]))),
                file=sys.stderr, flush=True)
        result = summarise(args.pages, args.budget, seed_seconds, seed.stat().st_size, pairs, args.latency)
    finally:
        stop(site_proc)
        if tmp is not None:
            tmp.cleanup()
    if args.json == "-":
        print(json.dumps(result, indent=1))
        return
    print_table(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
