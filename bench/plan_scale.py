"""Time the plan of a state that knows N pages, with the pre-selection and reading every page, in one process.

Seeds a state as ``bench/crawl_scale.py`` does (N pages of its generated site, a few visits of history
each), then plans it as the scheduler does at open (``CostAwareScheduler._plan``, the page index
included), alternating: once reading only the pages whose bound can reach the plan's head
(:mod:`scrapy_costsched.preselection`), once reading every page (``Tracker.preselect`` answering
``None``, as a store without SQL would), each time from a fresh copy of the seeded state. Prints the
median and range of each, the pages each plan planned (which must agree) and how many the pre-selection
left unread. ``--billing bandwidth`` gives each page a size of its own and the host a record of trusted
ETags and of its 304s' bytes, so its pages are priced at their marginal expected cost, as a byte-billed
crawl of a host that honours validators has them.

    python bench/plan_scale.py                                   # 200,000 pages, budget 5000 requests
    python bench/plan_scale.py --billing bandwidth --budget 2MB  # sizes of their own, a host sent validators
    python bench/plan_scale.py --hubs                            # every page links out
"""

from __future__ import annotations

import argparse
import gc
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.crawl_scale import seed_state
from bench.scale_spider import PAGE_TYPE, ScaleSpider
from scrapy_costsched import CostAwareScheduler
from scrapy_costsched.hosts import HostBook
from scrapy_costsched.model.trust import SignalTrust
from scrapy_costsched.storage import SqliteDictStorage
from scrapy_costsched.tracker import Tracker

SITE = "http://127.0.0.1:9"  # the URLs' host: nothing is fetched
HOST = "127.0.0.1"
#: Under byte billing: a page's mean full fetch and a 304's, in bytes (as the trials' site measured them).
FULL_BYTES, NOT_MODIFIED_BYTES = 3800.0, 430.0


def trust_validators(path: Path) -> None:
    """Record that the host's ETags proved trustworthy and what its answers weigh, as a crawl that was sent
    304s by it would have."""
    store = SqliteDictStorage(path)
    store.open()
    try:
        hosts = HostBook(store, MemoryStatsCollector(get_crawler()))
        validators = hosts.of(HOST)
        validators.etag = SignalTrust(agrees=20)
        for _ in range(40):
            validators.saw(etag=True, date=False)
            hosts.add_bytes(f"{HOST}|{PAGE_TYPE}", False, FULL_BYTES)
            hosts.add_bytes(f"{HOST}|{PAGE_TYPE}", True, NOT_MODIFIED_BYTES)
        hosts.save()
        store.commit()
    finally:
        store.close()


def plan_once(seed: Path, workdir: Path, settings: dict[str, Any], preselect: bool) -> tuple[float, dict[str, Any]]:
    """Seconds the plan of a fresh copy of *seed* took, and its plan stats."""
    state = workdir / "state.sqlite"
    shutil.copyfile(seed, state)
    crawler = get_crawler(ScaleSpider, {**settings, "COSTSCHED_STATE": str(state)})
    crawler.spider = crawler._create_spider(site=SITE)
    scheduler = CostAwareScheduler.from_crawler(crawler)
    scheduler.tracker.open()
    gc.collect()
    with mock.patch.object(Tracker, "preselect", Tracker.preselect if preselect else lambda *_: None):
        started = time.perf_counter()
        scheduler._plan()
        seconds = time.perf_counter() - started
    stats = {name.removeprefix("costsched/plan/"): value for name, value in scheduler.stats.get_stats().items()
             if name.startswith("costsched/plan/")}
    gc.unfreeze()  # what the plan froze, and the tracker's store closed (the wrapped scheduler was never opened)
    scheduler.tracker.close("finished")
    return seconds, stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=200_000, help="known pages in the state (default 200000)")
    parser.add_argument("--budget", default="5000", help="COSTSCHED_BUDGET (default 5000)")
    parser.add_argument("--billing", default="requests", choices=("requests", "bandwidth"),
                        help="COSTSCHED_BILLING (default requests)")
    parser.add_argument("--repeat", type=int, default=4, help="plans of each kind, alternating (default 4)")
    parser.add_argument("--hubs", action="store_true", help="every page links out (a spider that follows them all)")
    args = parser.parse_args()
    if args.pages < 2 or args.repeat < 1:
        parser.error("--pages must be at least 2 and --repeat at least 1")
    settings = {"COSTSCHED_BUDGET": args.budget, "COSTSCHED_BILLING": args.billing}
    with tempfile.TemporaryDirectory(prefix="plan_scale-") as tmp:
        workdir = Path(tmp)
        seed = workdir / "seed.sqlite"
        sized = args.billing == "bandwidth"
        seed_state(seed, SITE, args.pages, time.time(), sizes=FULL_BYTES if sized else None, hubs=args.hubs)
        if sized:
            trust_validators(seed)
        seconds: dict[bool, list[float]] = {True: [], False: []}
        planned: dict[bool, set[Any]] = {True: set(), False: set()}
        unread: list[Any] = []
        for r in range(args.repeat):
            for preselect in (True, False) if r % 2 == 0 else (False, True):
                took, stats = plan_once(seed, workdir, settings, preselect)
                seconds[preselect].append(took)
                planned[preselect].add(stats.get("planned"))
                if preselect:
                    unread.append(stats.get("unread", 0))
    print(f"plan_scale: {args.pages:,} known pages{', every one a hub' if args.hubs else ''}, budget {args.budget} "
          f"({args.billing}), {args.repeat} plans each")
    for preselect, name in ((True, "pre-selection"), (False, "every page read")):
        runs = seconds[preselect]
        print(f"  {name:<16} median {statistics.median(runs):.2f} s (range {min(runs):.2f}-{max(runs):.2f}); "
              f"planned {', '.join(map(str, sorted(planned[preselect], key=str)))}")
    print(f"  pages the pre-selection left unread: {', '.join(f'{n:,}' for n in sorted(set(unread)))}")


if __name__ == "__main__":
    main()
