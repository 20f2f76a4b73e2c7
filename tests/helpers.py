"""Shared helpers: the demo site on loopback, real ``scrapy crawl`` runs, and a read-only view of the state."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "example_project"
sys.path.insert(0, str(PROJECT))

from demo_site.catalog import DAY, EPOCH0, Catalog
from demo_site.clock import set_clock
from demo_site.server import serve_in_thread

if TYPE_CHECKING:
    from tests.mockserver import EdgeSite

TIERS = {"low": 0.25, "normal": 1.0, "high": 4.0, "critical": 16.0}


@dataclass
class DemoSite:
    """The example project's shop on 127.0.0.1, with its clock file."""

    catalog: Catalog
    url: str
    clock_file: Path

    def set_time(self, t: float) -> None:
        set_clock(self.clock_file, t)

    @staticmethod
    def day(d: float, hour: float = 6.0) -> float:
        return EPOCH0 + d * DAY + hour * 3600.0


@dataclass
class CrawlResult:
    returncode: int
    stats: dict[str, Any]
    items: list[dict[str, Any]]
    log: str
    args: list[str] = field(default_factory=list)


def crawl_options(budget: float | None, settings: dict[str, Any] | None,
                  spider_args: dict[str, Any] | None) -> list[str]:
    """The ``-s``/``-a`` options a test adds to a crawl: the budget, then its settings and spider arguments."""
    options = [] if budget is None else ["-s", f"COSTSCHED_BUDGET={budget}"]
    for name, value in (settings or {}).items():
        options += ["-s", f"{name}={value}"]
    for name, value in (spider_args or {}).items():
        options += ["-a", f"{name}={value}"]
    return options


def crawl_command(site: DemoSite, workdir: Path, *, budget: float | None = None, state: Path | None = None,
                  settings: dict[str, Any] | None = None, spider_args: dict[str, Any] | None = None,
                  tag: str = "run") -> tuple[list[str], dict[str, str], Path, Path]:
    workdir.mkdir(parents=True, exist_ok=True)
    stats_file, items_file = workdir / f"{tag}.stats.json", workdir / f"{tag}.items.jsonl"
    for stale in (stats_file, items_file):
        stale.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "scrapy", "crawl", "shop", "-a", f"site={site.url}",
           "-a", f"categories={site.catalog.categories}",
           "-s", f"COSTSCHED_STATE={state or workdir / 'state.sqlite'}",
           "-s", f"DEMO_STATS_FILE={stats_file}", "-O", f"{items_file}:jsonlines",
           *crawl_options(budget, settings, spider_args)]
    env = dict(os.environ, DEMO_CLOCK_FILE=str(site.clock_file),
               PYTHONPATH=os.pathsep.join([str(PROJECT), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return cmd, env, stats_file, items_file


def crawl(site: DemoSite, workdir: Path, *, timeout: float = 180, **kwargs: Any) -> CrawlResult:
    """One real ``scrapy crawl shop`` against *site*, as a scheduled job would run it."""
    cmd, env, stats_file, items_file = crawl_command(site, workdir, **kwargs)
    proc = subprocess.run(cmd, cwd=PROJECT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    stats = json.loads(stats_file.read_text()) if stats_file.exists() else {}
    items = [json.loads(line) for line in items_file.read_text().splitlines()] if items_file.exists() else []
    return CrawlResult(proc.returncode, stats, items, proc.stderr, cmd)


def runspider(site: EdgeSite, tmp: Path, *settings: str, chain: bool = False,
              env: dict[str, str] | None = None) -> dict[str, Any]:
    """``scrapy runspider tests/edge_spider.py`` against *site*; its stats (and ``_log``, the log)."""
    stats_file = tmp / "stats.json"
    cmd = [sys.executable, "-m", "scrapy", "runspider", str(ROOT / "tests" / "edge_spider.py"),
           "-a", f"site={site.url}", "-a", f"stats_file={stats_file}",
           "-s", f"COSTSCHED_STATE={tmp / 'state.sqlite'}", "-o", f"{tmp / 'items.jsonl'}:jsonlines"]
    for setting in settings:
        cmd += ["-s", setting]
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    if chain:
        full_env["EDGE_CHAIN"] = "1"
    proc = subprocess.run(cmd, cwd=tmp, env=full_env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    stats: dict[str, Any] = json.loads(stats_file.read_text())
    assert "log_count/ERROR" not in stats, proc.stderr[-3000:]
    stats["_log"] = proc.stderr
    return stats


def read_state(path: Path) -> dict[str, dict[str, Any]]:
    """Every table of a state file as plain dicts, read with sqlite3 alone (independent of the store code)."""
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        rows = conn.execute('SELECT key, value FROM "costsched"').fetchall()
        plan = conn.execute('SELECT * FROM "costsched_plan"').fetchall()
    finally:
        conn.close()
    tables: dict[str, dict[str, Any]] = {"meta": {}, "page": {}, "plan": {}}
    for key, value in rows:
        kind, _, name = key.partition(":")
        tables[kind][name] = json.loads(value)
    for key, n, text, *items in plan:
        tables["plan"][key] = items[:n] if text is None else json.loads(text)
    return {"meta": tables["meta"], "pages": tables["page"], "plan": tables["plan"]}


def start_site(tmp: Path, last_modified: str = "honest", hosts: tuple[str, ...] = ("honour",),
               byte_log: Path | None = None, throttle: dict[int, Any] | None = None,
               **catalog_args: Any) -> tuple[DemoSite, Any]:
    """The demo shop on loopback: one honest host, or one host per validator mode of *hosts* (those of
    *throttle*'s indexes throttling, :class:`demo_site.server.Throttle`)."""
    catalog = Catalog.generate(**catalog_args)
    server, url = serve_in_thread(catalog, last_modified=last_modified, hosts=hosts, byte_log=byte_log,
                                  throttle=throttle)
    site = DemoSite(catalog, url, tmp / "clock")
    site.set_time(site.day(0))
    return site, server


#: What :func:`fake_now` gives in a process where no test moved it: in a crawl's subprocess.
FAKE_START = 1_767_225_600.0
#: The clock of in-process component tests (``COSTSCHED_CLOCK = "tests.helpers.fake_now"``); they move it.
NOW = [FAKE_START]


def fake_now() -> float:
    return NOW[0]


def fake_tomorrow() -> float:
    """A day after :func:`fake_now`: what a crawl at :func:`fake_now` saw is due again."""
    return NOW[0] + 86400.0
