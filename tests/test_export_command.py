"""``COSTSCHED_STORE_RECORDS`` and ``scrapy costsched-export``: real crawls of a news site under a budget over
simulated days, then the snapshot of every page's last known record, checked against what the crawls' own
feeds wrote and what the site served each day."""

from __future__ import annotations

import csv
import dataclasses
import datetime
import json
import math
import os
import subprocess
import sys
from collections import defaultdict
from itertools import permutations
from typing import TYPE_CHECKING, Any

import pytest

from scrapy_costsched.model import RatePrior
from tests.components import Product
from tests.helpers import FAKE_START, ROOT, read_state, runspider
from tests.newssite import NEWS_PROJECT, NewsSite, news_command, run_news

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.mockserver import EdgeSite

DAY = 86400.0
EXPORTED = ("costsched_url", "costsched_fetched_at", "costsched_age", "costsched_stale_probability",
            "costsched_page_type")
STORE = {"COSTSCHED_STORE_RECORDS": True}


class TypedFieldsPipeline:
    """A user's pipeline after the project's cleaning one: a new item with fields JSON has no type for."""

    def process_item(self, item: Any, spider: Any = None) -> Any:
        fields = dataclasses.asdict(item)
        return {**fields, "updated_at": datetime.datetime.fromisoformat(fields["updated"]),
                "refs": {fields["id"], fields["section"]}}


PIPELINES = json.dumps({"news.pipelines.CleanArticlePipeline": 300,
                        "tests.test_export_command.TypedFieldsPipeline": 310})


@pytest.fixture
def site(tmp_path: Path) -> Iterator[NewsSite]:
    with NewsSite(tmp_path / "clock", sections=3) as news:
        yield news


def export(site: NewsSite, workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``scrapy costsched-export ARGS`` in the news project, at the site's current time."""
    _, env, _, _ = news_command(site, workdir)
    return subprocess.run([sys.executable, "-m", "scrapy", "costsched-export", *args], cwd=NEWS_PROJECT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat()


def test_the_export_holds_every_page_s_last_full_visit(site: NewsSite, tmp_path: Path) -> None:
    crawl = tmp_path / "crawl"
    state = crawl / "state.sqlite"
    fed: dict[str, tuple[int, list[dict[str, Any]]]] = {}  # url -> the last day it was in the feed, its items
    fetched: dict[str, int] = {}  # article URL -> the last day the site served it (200 or 304)
    # Day 2's budget revisits enough articles for some to answer 304 (at 12, one or two did, and none in a loaded
    # run: the check below failed once in a fresh-clone run under Scrapy 2.13).
    for day, budget in ((0, None), (1, 12), (2, 20)):
        site.set_day(day)
        site.reset_counts()
        result = run_news(site, crawl, budget=budget, settings={**STORE, "ITEM_PIPELINES": PIPELINES},
                          tag=f"day{day}")
        assert result.returncode == 0, result.log[-3000:]
        by_url = defaultdict(list)
        for item in result.items:
            by_url[item["url"]].append(item)
        fed.update({url: (day, items) for url, items in by_url.items()})
        fetched.update({f"{site.url}{path}": day for path in site.hits if path.startswith("/article/")})
    assert result.stats["costsched/not_modified"] > 0  # some pages were only confirmed by a 304 on day 2

    site.set_day(3)
    now = site.now()
    jl, csv_file = tmp_path / "snapshot.jl", tmp_path / "snapshot.csv"
    done = export(site, crawl, str(jl), "--spider", "news", "-s", f"COSTSCHED_STATE={state}")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in jl.read_text().splitlines()]
    assert done.stderr.strip().splitlines()[-1] == f"costsched-export: {len(fed)} pages, {len(rows)} items written to {jl}"

    exported = defaultdict(list)
    for row in rows:
        exported[row["costsched_url"]].append(row)
    assert exported.keys() == fed.keys()  # every page that ever yielded items; sections and the front page none
    for url, (_, items) in fed.items():
        assert len(exported[url]) == len(items) == 1
        row, item = exported[url][0], items[0]
        # The item as the pipelines left it: the project's cleaning pipeline returned a new, stripped object,
        # and the fields JSON cannot hold are text (the feed's JSON encoder wrote them its own way).
        assert {k: v for k, v in row.items() if k not in (*EXPORTED, "updated_at", "refs")} \
            == {k: v for k, v in item.items() if k not in ("updated_at", "refs")}
        assert row["title"] == site.title(site.article(row["id"]))
        assert row["updated_at"] == row["updated"]  # datetime.isoformat() of the parsed field
        assert row["refs"] == "{" + ", ".join(sorted(repr(n) for n in item["refs"])) + "}"
        assert row["costsched_page_type"] == "article"
        # Fetched at the last visit, 304s included: a 304 confirms the stored record.
        assert row["costsched_fetched_at"] == iso(site.day(fetched[url]))
        assert row["costsched_age"] == now - site.day(fetched[url])
    confirmed = [url for url in fed if fetched[url] > fed[url][0]]
    assert confirmed, "no page was confirmed by a 304 after its last full visit"
    assert {fetched[url] for url in fed} >= {0, 1, 2}  # the budget left pages unvisited on the last days

    # Stale probability: 1 - e^(-rate·age) with the page's rate per day (its estimate, else its group's prior).
    stored = {page["url"]: page for page in read_state(state)["pages"].values()}
    priors = read_state(state)["meta"].get("priors", {})
    rates = {}
    for url in fed:
        page = stored[url]
        group = f"{page['host']}|{page['page_type']}"
        rates[url] = page["estimate"][0] if page["estimate"] else math.exp(priors.get(group, [RatePrior().mean_log])[0])
        p = exported[url][0]["costsched_stale_probability"]
        assert 0.0 <= p <= 1.0
        assert p == pytest.approx(-math.expm1(-rates[url] * exported[url][0]["costsched_age"] / DAY), rel=1e-12)
    ordered = [(a, b) for a, b in permutations(fed, 2) if rates[a] >= rates[b]
               and exported[a][0]["costsched_age"] > exported[b][0]["costsched_age"]]
    assert ordered
    for a, b in ordered:  # older or faster: more likely stale
        assert exported[a][0]["costsched_stale_probability"] > exported[b][0]["costsched_stale_probability"]

    # The same records as CSV (one header for all) and on stdout; filters choose pages.
    done = export(site, crawl, str(csv_file), "--state", str(state))
    assert done.returncode == 0, done.stderr[-3000:]
    with csv_file.open(newline="", encoding="utf-8") as f:
        assert list(csv.DictReader(f)) == [{k: str(v) for k, v in row.items()} for row in rows]
    done = export(site, crawl, "-", "-t", "jsonlines", "--state", str(state))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == jl.read_text()
    assert "items written to stdout" in done.stderr
    done = export(site, crawl, str(jl), "--state", str(state), "--page-type", "section")
    assert done.returncode == 0, done.stderr[-3000:]
    assert jl.read_text() == ""
    assert "costsched-export: 0 pages, 0 items" in done.stderr


def test_without_stored_records_the_export_says_how_to_get_them(site: NewsSite, tmp_path: Path) -> None:
    crawl = tmp_path / "crawl"
    assert run_news(site, crawl, tag="day0").returncode == 0
    out = tmp_path / "snapshot.jl"
    done = export(site, crawl, str(out), "--state", str(crawl / "state.sqlite"))
    assert done.returncode == 2
    assert "holds no stored records: set COSTSCHED_STORE_RECORDS = True" in done.stderr.splitlines()[-1]
    assert not out.exists()
    for args, message in ((("snapshot.txt",), "cannot tell the format of 'snapshot.txt' from its extension"),
                          (("-",), "writing to stdout needs -t FORMAT"),
                          (("snapshot.jl", "-t", "yaml"), "-t 'yaml' is not a feed format of this project"),
                          (("a.jl", "b.jl"), "give one output FILE")):
        done = export(site, crawl, *args, "--state", str(crawl / "state.sqlite"))
        assert done.returncode == 2
        assert message in done.stderr.splitlines()[-1]


def test_a_failed_visit_keeps_the_record_and_its_time(edge_site: EdgeSite, tmp_path: Path) -> None:
    store = ("COSTSCHED_STORE_RECORDS=True",)
    runspider(edge_site, tmp_path, *store, "COSTSCHED_CLOCK=tests.helpers.fake_now")
    edge_site.version, edge_site.flaky_odd = 1, True  # pages change; /flaky/2 answers 503 to its next hit
    stats = runspider(edge_site, tmp_path, *store, "COSTSCHED_CLOCK=tests.helpers.fake_tomorrow",
                      "RETRY_ENABLED=False")
    assert stats["costsched/failed"] == 1
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "scrapy", "costsched-export", "snapshot.jl", "--state",
                           str(tmp_path / "state.sqlite"), "-s", "COSTSCHED_CLOCK=tests.helpers.fake_tomorrow"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {row["costsched_url"]: row for row in map(json.loads, (tmp_path / "snapshot.jl").read_text().splitlines())}
    flaky, page = rows[f"{edge_site.url}/flaky/2"], rows[f"{edge_site.url}/page/1"]
    assert flaky["title"] == "flaky 2 v0"
    assert (flaky["costsched_fetched_at"], flaky["costsched_age"]) == (iso(FAKE_START), DAY)
    assert page["title"] == "page 1 v1"
    assert (page["costsched_fetched_at"], page["costsched_age"]) == (iso(FAKE_START + DAY), 0.0)
    assert page["costsched_stale_probability"] == 0.0 < flaky["costsched_stale_probability"]


class Unprintable:
    """A field value with no text."""

    def __str__(self) -> str:
        raise RuntimeError("no text")


URL = "http://shop.example/p/1"


def test_items_are_stored_as_they_left_the_pipelines_or_counted(runs: Any) -> None:
    run = runs(**STORE)
    run.visit(URL, [Product("a", 1.0), Product("b", Unprintable())])  # type: ignore[arg-type]
    assert run.stats["costsched/items/unstorable"] == 1
    assert run.page(URL).items == [{"sku": "a", "price": 1.0, "name": "kettle", "ts": ""}]
    # Items ChangeDetectionPipeline drops as unchanged are still part of the page's record.
    run = runs(**STORE, COSTSCHED_DROP_UNCHANGED=True)
    assert run.visit(URL, [Product("a", 1.0), Product("c", 3.0)]) == [Product("c", 3.0)]
    assert [item["sku"] for item in run.page(URL).items] == ["a", "c"]
    # Switched off, a full visit does not leave an older record behind as if it were current.
    run = runs()
    run.visit(URL, [Product("a", 2.0)])
    assert run.page(URL).items is None
