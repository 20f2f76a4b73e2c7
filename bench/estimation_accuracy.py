"""How well real crawls learn change rates: median |log(estimate / truth)| after N simulated days.

Runs the example project (real ``scrapy crawl`` processes) against the demo site once a day and
prints one JSON object per seed. ``--mix cho`` is the demo's Cho & Garcia-Molina 2000 mix;
``--mix learnable`` draws rates log-uniformly over 1/20..2 per day, the range a daily crawl can
resolve in 20 days. ``--last-modified volatile`` serves a Last-Modified that is always "now", which
the tracker never trusts, so the same crawls learn from visit outcomes alone; the default (``honest``)
lets it date changes.

    python bench/estimation_accuracy.py --mix cho --seeds 7 8 9
    python bench/estimation_accuracy.py --mix cho --seeds 7 8 9 --last-modified volatile
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "example_project")]

from demo_site.catalog import RATE_BUCKETS
from demo_site.server import LAST_MODIFIED_MODES

from tests.helpers import crawl, read_state, start_site

MIXES = {"cho": RATE_BUCKETS, "learnable": ((1.0, 1 / 20, 2.0),)}


def run(seed: int, mix: str, days: int, budget: int, products: int, last_modified: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        os.environ["DEMO_CLOCK_FILE"] = str(tmp / "clock")
        site, server = start_site(tmp, last_modified, products=products, categories=3, seed=seed,
                                  horizon_days=days + 5, rate_buckets=MIXES[mix])
        try:
            for day in range(1, days + 1):
                site.set_time(site.day(day))
                result = crawl(site, tmp / "work", budget=budget, tag=f"day{day}")
                if result.returncode:
                    raise SystemExit(result.log[-2000:])
            state = read_state(tmp / "work" / "state.sqlite")
        finally:
            server.close()
    errors = [abs(math.log(page["estimate"][0] / site.catalog.product(int(page["url"].rsplit("/", 1)[1])).rate))
              for page in state["pages"].values() if page["visits"] >= 5 and page["page_type"] == "product"]
    return {"mix": mix, "last_modified": last_modified, "seed": seed, "days": days, "budget": budget, "pages_visited_5_times": len(errors),
            "median_abs_log_error": round(statistics.median(errors), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mix", choices=sorted(MIXES), default="cho")
    parser.add_argument("--seeds", type=int, nargs="+", default=[7])
    parser.add_argument("--days", type=int, default=20)
    parser.add_argument("--budget", type=int, default=30, help="requests per day")
    parser.add_argument("--products", type=int, default=60)
    parser.add_argument("--last-modified", choices=LAST_MODIFIED_MODES, default="honest",
                        help="how the demo host's Last-Modified behaves (default: honest)")
    args = parser.parse_args()
    for seed in args.seeds:
        print(json.dumps(run(seed, args.mix, args.days, args.budget, args.products, args.last_modified)), flush=True)


if __name__ == "__main__":
    main()
