"""Time one cycle's planning over N known pages, as the Scrapy scheduler plans it.

Builds N candidates the way the tracker does (a 40-hex fingerprint, a value tier,
a learned rate with its 90% posterior interval, the time since the last visit,
the cost), then ranks them with :func:`~scrapy_costsched.model.scoring.rank`
and takes the affordable prefix of a 20% budget.  Prints one JSON object:
``pages``, ``seconds`` (rank + affordable prefix, wall clock), ``bytes_per_page``
(peak resident memory added by the candidates and the plan, per page), and the
details (candidate build time, CPU time, options).

    python bench/plan_speed.py --pages 1000000
    python bench/plan_speed.py --pages 1000000 --point --cycle 0   # point rates, continuous index
"""

from __future__ import annotations

import argparse
import json
import math
import random
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scrapy_costsched.model.scoring import Candidate, affordable_prefix, rank

TIERS = (0.25, 1.0, 4.0, 16.0)


def peak_rss() -> int:
    """Peak resident set size of this process, in bytes (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def candidates(n: int, seed: int, point: bool) -> list[Candidate]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        rate = math.exp(rng.uniform(math.log(1e-3), math.log(24.0)))
        spread = math.exp(rng.uniform(0.2, 2.0))  # 90% interval factor: long to short histories
        elapsed = math.inf if rng.random() < 0.01 else float(rng.randint(1, 60))
        low, high = (None, None) if point else (rate / spread, rate * spread)
        out.append(Candidate(f"{rng.getrandbits(160):040x}", rng.choice(TIERS), rate, elapsed, 1.0, None, low, high))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=1_000_000)
    parser.add_argument("--budget", type=float, default=0.2, help="fraction of the pages per cycle (default 0.2)")
    parser.add_argument("--cycle", type=float, default=1.0, help="planning cycle in days (0: continuous index)")
    parser.add_argument("--point", action="store_true", help="point rates only (no posterior interval)")
    parser.add_argument("--objective", default="freshness", choices=("freshness", "changes"))
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    baseline = peak_rss()
    started = time.perf_counter()
    pages = candidates(args.pages, args.seed, args.point)
    built = time.perf_counter()
    cpu = time.process_time()
    ranking = rank(pages, args.objective, cycle=args.cycle)
    ranked = time.perf_counter()
    plan = affordable_prefix(ranking, args.budget * args.pages)
    done = time.perf_counter()
    cpu = time.process_time() - cpu
    peak = peak_rss()
    print(json.dumps({
        "pages": args.pages,
        "seconds": round(done - built, 3),
        "bytes_per_page": round((peak - baseline) / args.pages),
        "rank_seconds": round(ranked - built, 3),
        "prefix_seconds": round(done - ranked, 3),
        "cpu_seconds": round(cpu, 3),
        "build_seconds": round(built - started, 3),
        "planned": len(plan),
        "ranked": len(ranking),
        "posterior_interval": not args.point,
        "cycle": args.cycle,
        "objective": args.objective,
        "python": sys.version.split()[0],
    }))


if __name__ == "__main__":
    main()
