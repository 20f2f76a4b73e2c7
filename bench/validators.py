"""What conditional requests buy at a fixed byte budget: freshness and bytes, middleware on and off.

Runs the example project (real ``scrapy crawl`` processes, bandwidth billing) once a simulated day
against the six-host demo site (hosts that honour, ignore, rotate or fake validators, one with no
validators, one rotating ETags under volatile dates) with ``COSTSCHED_CONDITIONAL`` on and off, at
budgets given as shares of what a full crawl moves on day 1. Prints one JSON object per budget:
mean value-weighted true freshness over days 2..N, bytes by the server's own count, visits a day,
304s, and the bytes of an unchanged visit to the honouring host over a full fetch of the same page.

    python bench/validators.py --shares 0.3 0.5 0.9 --days 8
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "example_project")]

from demo_shop.settings import COSTSCHED_VALUE_TIERS
from demo_site.catalog import DAY
from demo_site.evaluate import Dataset, freshness
from demo_site.wire import read_byte_log

from tests.helpers import DemoSite, crawl, start_site

HOSTS = ("honour", "ignore", "rotate", "false304", "none", "rotate:volatile")


def _strategy(site: DemoSite, work: Path, byte_log: Path, budget: int, days: int, conditional: bool) -> dict[str, Any]:
    dataset, fresh, spent, visits, not_modified = Dataset(), [], 0, [], 0
    offset = byte_log.stat().st_size
    for day in range(1, days + 1):
        t = site.day(day)
        site.set_time(t)
        result = crawl(site, work, budget=budget, tag=f"day{day}",
                       settings={"COSTSCHED_BILLING": "bandwidth", "COSTSCHED_CONDITIONAL": conditional})
        if result.returncode:
            raise SystemExit(result.log[-3000:])
        entries, offset = read_byte_log(byte_log, offset)
        spent += sum(e["sent"] + e["received"] for e in entries)
        dataset.update(site.catalog, result.items, t)
        fresh.append(freshness(site.catalog, dataset, t, t + DAY, COSTSCHED_VALUE_TIERS).weighted)
        visits.append(result.stats.get("costsched/visits", 0))
        not_modified += result.stats.get("costsched/not_modified", 0)
    return {"freshness": round(statistics.fmean(fresh[1:]), 4), "bytes": spent,
            "visits_per_day": round(statistics.fmean(visits[1:]), 1), "not_modified": not_modified}


def _not_modified_share(entries: list[dict[str, Any]], host: str) -> float | None:
    """Largest bytes of a 304 over the last full fetch of the same page (pages of 5 KB and more)."""
    full: dict[str, int] = {}
    ratios = []
    for entry in entries:
        if entry["host"] != host:
            continue
        size = entry["sent"] + entry["received"]
        if entry["status"] == 200:
            full[entry["path"]] = size
        elif entry["status"] == 304 and full.get(entry["path"], 0) >= 5000:
            ratios.append(size / full[entry["path"]])
    return round(max(ratios), 4) if ratios else None


def run(share: float, days: int, products: int, seed: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        os.environ["DEMO_CLOCK_FILE"] = str(tmp / "clock")
        byte_log = tmp / "bytes.jsonl"
        site, server = start_site(tmp, hosts=HOSTS, byte_log=byte_log, products=products, categories=4, seed=seed,
                                  horizon_days=days + 5)
        try:
            site.set_time(site.day(1))
            crawl(site, tmp / "full", tag="full")
            full_bytes = sum(e["sent"] + e["received"] for e in read_byte_log(byte_log)[0])
            budget = round(share * full_bytes)
            on = _strategy(site, tmp / "on", byte_log, budget, days, conditional=True)
            off = _strategy(site, tmp / "off", byte_log, budget, days, conditional=False)
            honour = server.urls[HOSTS.index("honour")].split("//")[1].split(":")[0]
            ratio = _not_modified_share(read_byte_log(byte_log)[0], honour)
        finally:
            server.close()
    return {"budget_share": share, "budget_bytes": budget, "days": days, "products": products, "seed": seed,
            "on": on, "off": off, "max_304_over_full_fetch": ratio}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shares", type=float, nargs="+", default=[0.3, 0.5, 0.9])
    parser.add_argument("--days", type=int, default=8)
    parser.add_argument("--products", type=int, default=120)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    for share in args.shares:
        print(json.dumps(run(share, args.days, args.products, args.seed)), flush=True)


if __name__ == "__main__":
    main()
