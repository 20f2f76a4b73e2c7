"""The demo's claims, checked on a real 10-day run of ``example_project/run_demo.py``."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING

from tests.helpers import ROOT

if TYPE_CHECKING:
    from pathlib import Path


def test_demo_beats_random_and_nears_full_recrawl_at_half_the_requests(tmp_path: Path) -> None:
    summary = tmp_path / "demo.json"
    proc = subprocess.run([sys.executable, str(ROOT / "example_project" / "run_demo.py"), "--days", "10",
                           "--workdir", str(tmp_path / "work"), "--json", str(summary)],
                          capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(summary.read_text())
    days = report["days"]
    assert [day["day"] for day in days] == list(range(1, 11))
    for day in days:
        costsched, full, random = day["costsched"], day["full"], day["random"]
        assert costsched["errors"] == 0
        # plain Scrapy logs one ERROR per throttled request it gives up retrying, and nothing else
        assert full["errors"] == full["gave_up"]
        assert random["errors"] == random["gave_up"]
        # every 429 is retried or given up on: what is left is one request per page
        pages = full["visits"] - full["throttled"] + full["gave_up"]
        assert pages == day["full_pages"], "one crawl from the main host reaches every host"
        sample = random["visits"] - random["throttled"] + random["gave_up"]
        assert sample == costsched["visits"], "the random subset has the same size"
        assert costsched["visits"] <= full["visits"] / 2
        if day["day"] >= 4:
            assert costsched["freshness"] > random["freshness"], day["day"]
            assert costsched["freshness"] >= 0.9 * full["freshness"], day["day"]

    # One host per validator mode and one more that throttles; the server's byte log accounts for every
    # host and strategy.
    hosts = report["hosts"]
    assert [h["mode"] for h in hosts] == ["honour", "ignore", "rotate", "false304", "none", "honour"]
    assert [h["host"] for h in hosts] == [f"127.0.0.{i}" for i in range(1, 7)]
    assert [h["throttle"] is not None for h in hosts] == [False] * 5 + [True]
    throttling = hosts[-1]
    assert throttling["full"]["throttled"] > 0, "plain Scrapy meets the quota every day"
    for h in hosts[:-1]:
        assert h["costsched"]["throttled"] == h["full"]["throttled"] == h["random"]["throttled"] == 0
        assert h["costsched"]["inside_block"] == h["full"]["inside_block"] == 0
    for h in hosts:
        for strategy in ("costsched", "full", "random"):
            assert h[strategy]["requests"] > 0
            assert h[strategy]["bytes"] > 0
        if h["mode"] != "false304":  # the server's truth: only the lying host answers 304 to a changed page
            assert h["costsched"]["false_not_modified"] == 0
        assert h["full"]["not_modified"] == h["random"]["not_modified"] == 0  # plain Scrapy sends no validators
    assert "per host, costsched over 10 days" in proc.stdout
    assert "per host, throttling and health over 10 days" in proc.stdout
    # costsched's own byte count, beside the server's, for every day
    spend = report["bytes"]
    assert [d["day"] for d in spend["days"]] == list(range(1, 11))
    assert spend["server"] == sum(h["costsched"]["bytes"] for h in hosts)
    assert all(d["crawler"] > 0 for d in spend["days"])
    assert "costsched spend in bytes" in proc.stdout
