"""What a commit costs in host bookkeeping when a crawl knows many hosts.

Every observation commit saves the host book (validator audits, bytes, health). It writes one
row per host touched since the last commit, so its cost follows the visits in the batch, not the
hosts known. This fills a book with N hosts, saves it once (every host touched), then commits
batches that each touch a few of them, and prints the milliseconds of each and the bytes of the rows
written, next to what saving every host costs.

    python bench/host_commits.py                     # 5,000 hosts, batches touching 50
    python bench/host_commits.py --hosts 50000 --touched 50
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from scrapy.utils.test import get_crawler

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scrapy_costsched.hosts import HOST_PREFIX, HostBook
from scrapy_costsched.storage import SqliteDictStorage

TODAY = 20_000.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=5000, help="hosts the book knows (default 5000)")
    parser.add_argument("--touched", type=int, default=50, help="hosts each commit's visits touch (default 50)")
    parser.add_argument("--commits", type=int, default=20, help="batches timed (default 20)")
    args = parser.parse_args()
    if args.hosts < 1 or not 0 < args.touched <= args.hosts or args.commits < 1:
        parser.error("--hosts and --commits must be positive, --touched between 1 and --hosts")
    stats = get_crawler().stats
    assert stats is not None
    with tempfile.TemporaryDirectory(prefix="host_commits-") as tmp:
        store = SqliteDictStorage(Path(tmp) / "state.sqlite")
        store.open()
        book = HostBook(store, stats)
        hosts = [f"shop{i}.example" for i in range(args.hosts)]
        for host in hosts:
            book.of(host).saw(True, True)
            book.add_bytes(f"{host}|product", False, 12_000.0)
            book.attempt(host, "ok", TODAY, 12_000.0, 0.2)
        started = time.perf_counter()
        book.save()
        store.commit()
        every_host = time.perf_counter() - started
        row_bytes = sum(len(json.dumps(value)) for _, value in store.iter_meta(HOST_PREFIX))
        started = time.perf_counter()
        for batch in range(args.commits):
            for i in range(args.touched):
                book.attempt(hosts[(batch * args.touched + i) * 7 % args.hosts], "ok", TODAY, 12_000.0, 0.2)
            book.save()
            store.commit()
        per_commit = (time.perf_counter() - started) / args.commits
        store.close()
    print(f"host_commits: {args.hosts:,} hosts known, {row_bytes / args.hosts:.0f} bytes of row each")
    print(f"saving every host: {every_host * 1000:.1f} ms ({row_bytes / 1e6:.1f} MB of rows)")
    print(f"a commit touching {args.touched} hosts: {per_commit * 1000:.2f} ms "
          f"(mean of {args.commits}, host rows and SQLite commit)")


if __name__ == "__main__":
    main()
