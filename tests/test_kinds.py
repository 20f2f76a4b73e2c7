"""What kind a new page is likely to be: the counts by callback and by hub group, their rule, how runs carry them,
and the tracker's use of them."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from scrapy import Request

from scrapy_costsched.kinds import MIN_PAGES, SHARE, KindCounts, callback_of, request_callback
from scrapy_costsched.pages import UNTYPED
from tests.components import Product, ShopSpider
from tests.helpers import read_state

if TYPE_CHECKING:
    from pathlib import Path


def _observed(counts: dict[str, int], callback: str = "parse_job", kinds: KindCounts | None = None) -> KindCounts:
    kinds = kinds if kinds is not None else KindCounts()
    for kind, count in counts.items():
        for _ in range(count):
            kinds.observe(callback, kind)
    return kinds


@pytest.mark.parametrize(("counts", "expected"), [
    ({"Job": MIN_PAGES}, "Job"),
    ({"Job": MIN_PAGES - 1}, None),  # too few pages to go by
    ({"Job": 9, "Ad": 1}, "Job"),  # 90%: the share
    ({"Job": 8, "Ad": 2}, None),
    ({"Job": 9, UNTYPED: 2}, None),  # some of its pages yield no items: a list is no job
    ({UNTYPED: 20}, None),  # a list callback names no kind, and its new URLs stay untyped
])
def test_a_callback_names_a_kind_once_enough_of_its_pages_are_of_it(counts: dict[str, int], expected: str | None) -> None:
    assert SHARE == 0.9
    assert _observed(counts).kind_of("parse_job") == expected
    assert _observed(counts).kind_of("parse_other") is None


def test_a_run_that_saw_enough_pages_replaces_what_earlier_runs_counted() -> None:
    earlier = KindCounts.from_state(json.loads(json.dumps(_observed({"Job": 40}).to_state())))
    assert earlier.kind_of("parse_job") == "Job"
    # The spider changed: parse_job now parses ads. Until this run has seen MIN_PAGES of them, the counts add up.
    _observed({"Ad": MIN_PAGES - 1}, kinds=earlier)
    assert earlier.kind_of("parse_job") == "Job"
    _observed({"Ad": 1}, kinds=earlier)
    assert earlier.kind_of("parse_job") == "Ad"
    assert earlier.to_state() == {"parse_job": {"Ad": MIN_PAGES}}


def test_a_run_that_saw_few_pages_adds_to_the_stored_counts() -> None:
    earlier = KindCounts.from_state(_observed({"Job": 3}).to_state())
    assert earlier.kind_of("parse_job") is None
    _observed({"Job": 2}, kinds=earlier)
    assert earlier.kind_of("parse_job") == "Job"
    assert earlier.to_state() == {"parse_job": {"Job": 5}}


def test_unsaved_says_whether_a_page_was_counted_since_the_last_save() -> None:
    kinds = KindCounts.from_state({"parse_job": {"Job": 7}})
    assert not kinds.unsaved
    kinds.observe("parse_job", "Job")
    assert kinds.unsaved
    kinds.to_state()
    assert not kinds.unsaved


@pytest.mark.parametrize("stored", [None, [], "parse_job", {"parse_job": ["Job"]}, {7: {"Job": 5}}])
def test_a_malformed_state_counts_nothing(stored: object) -> None:
    kinds = KindCounts.from_state(stored)
    assert kinds.to_state() == {}
    assert kinds.kind_of("parse_job") is None


def test_malformed_counts_are_left_out_and_the_rest_kept() -> None:
    kinds = KindCounts.from_state({"parse_job": {"Job": 6, "Ad": "x", "Bad": -1, "Flag": True},
                                   "parse_list": {UNTYPED: 3}})
    assert kinds.to_state() == {"parse_job": {"Job": 6}, "parse_list": {UNTYPED: 3}}
    assert kinds.kind_of("parse_job") == "Job"


@pytest.mark.parametrize(("name", "meta", "key"), [
    ("parse_job", {}, "parse_job"),
    (None, {}, "parse"),  # the spider's default callback
    ("_callback", {"rule": 1, "link_text": "Job 7"}, "rule 1"),  # a CrawlSpider's rule
    ("_callback", {}, "_callback"),
])
def test_callback_of_names_the_method_and_a_crawl_spider_s_rule(name: str | None, meta: dict[str, object],
                                                                key: str) -> None:
    assert callback_of(name, meta) == key


def test_request_callback_names_the_spider_s_methods_only() -> None:
    spider, other = ShopSpider(), ShopSpider()
    assert request_callback(Request("https://shop.test/", callback=spider.parse), spider) == "parse"
    assert request_callback(Request("https://shop.test/"), spider) == "parse"
    assert request_callback(Request("https://shop.test/", callback=other.parse), spider) is None

    def function(response: Any) -> list[Any]:
        return []

    assert request_callback(Request("https://shop.test/", callback=function), spider) is None


def test_a_new_page_starts_as_its_callback_s_kind_and_its_first_visit_types_it_from_its_items(runs: Any) -> None:
    """The tracker's side: ``parse``'s pages yielded products, so a new page sent to it starts as one; the first
    visit's items have the last word (none: untyped), a tagged page keeps its tag, and the counts carry over."""
    run = runs()
    for n in range(MIN_PAGES):
        run.visit(f"https://shop.test/p/{n}", [Product(sku=str(n), price=1.0)])
    assert run.page("https://shop.test/p/0").page_type == "Product"
    assert "costsched/pages/typed_by_callback" not in run.stats
    run = runs()  # the next run: the kind came through the state
    run.visit("https://shop.test/p/new", [Product(sku="new", price=2.0)])
    run.visit("https://shop.test/list", [])
    run.visit("https://shop.test/tagged", [Product(sku="t", price=3.0)], meta={"costsched_page_type": "Deal"})
    assert run.page("https://shop.test/p/new").page_type == "Product"
    assert run.page("https://shop.test/list").page_type == UNTYPED  # started as a product, showed none
    assert run.page("https://shop.test/tagged").page_type == "Deal"
    assert run.stats["costsched/pages/typed_by_callback"] == 2
    assert run.stats["costsched/pages/retyped"] == 1
    # Six of its eight pages products (five earlier, one now; a list and a deal now): under the share, no kind.
    assert run.tracker.kinds.kind_of("parse") is None


def test_a_hub_s_new_pages_are_priced_as_the_kind_its_group_s_new_links_were(runs: Any, tmp_path: Path) -> None:
    """A list yields links to new pages whose callback's pages were products: the list's group reveals products,
    and a hub of it is planned with new pages of that kind; links that declare a type count as it."""
    run = runs()
    spider = run.crawler.spider
    for n in range(MIN_PAGES):
        run.visit(f"https://shop.test/p/{n}", [Product(sku=str(n), price=1.0)])
    assert run.tracker.revealed_kind("shop.test|default") == UNTYPED  # nothing revealed yet
    run.visit("https://shop.test/list", [Request(f"https://shop.test/p/new{n}", callback=spider.parse)
                                         for n in range(MIN_PAGES)])
    assert run.page("https://shop.test/list").page_type == UNTYPED
    assert run.tracker.revealed_kind("shop.test|default") == "Product"
    run.visit("https://shop.test/deals", [Request(f"https://shop.test/d/{n}", callback=spider.parse,
                                                  meta={"costsched_page_type": "Deal"}) for n in range(2 * MIN_PAGES)])
    assert run.tracker.revealed_kind("shop.test|default") == UNTYPED  # 5 products and 10 deals: no kind
    later = runs()  # the next run: the counts came through the state
    assert read_state(tmp_path / "state.sqlite")["meta"]["revealed_kinds"] == {
        "shop.test|default": {"Product": MIN_PAGES, "Deal": 2 * MIN_PAGES}}
    assert later.tracker.revealed_kind("shop.test|default") == UNTYPED


def test_a_hub_s_new_pages_are_priced_at_the_mean_value_its_group_s_new_links_were_given(runs: Any, tmp_path: Path,
                                                                                          ) -> None:
    """The values the spider gives the new pages a list links to (``costsched_value``, or its hook), as their
    sightings take them once the scheduler has their requests, price the next ones the list's group reveals; a link
    the scheduler never sees (a filter dropped it) counts for nothing, and the counts carry over to the next run."""
    run = runs()
    spider = run.crawler.spider
    tracker = run.tracker

    def reveal(url: str, links: list[Request], sighted: int | None = None) -> None:
        run.visit(url, list(links))
        for link in links[:sighted]:
            tracker.sighting(link, tracker.fingerprint(link))

    group = "shop.test|default"
    assert tracker.revealed_value(group) == 1.0  # the default value, before anything was revealed
    high = [Request(f"https://shop.test/p/{n}", callback=spider.parse, meta={"costsched_value": "high"})
            for n in range(MIN_PAGES - 1)]
    reveal("https://shop.test/list", high)
    assert tracker.revealed_value(group) == 1.0  # too few to go by
    untagged = [Request(f"https://shop.test/p/plain{n}", callback=spider.parse) for n in range(2)]
    reveal("https://shop.test/list2", untagged, sighted=1)  # one of them dropped before the scheduler
    assert tracker.revealed_value(group) == pytest.approx((4.0 * (MIN_PAGES - 1) + 1.0) / MIN_PAGES)
    assert tracker._new_pages(group).value == tracker.revealed_value(group)
    spider.costsched_value = lambda source: 16.0 if "/deal/" in getattr(source, "url", "") else None
    reveal("https://shop.test/deals", [Request(f"https://shop.test/deal/{n}", callback=spider.parse)
                                       for n in range(MIN_PAGES)])
    expected = (4.0 * (MIN_PAGES - 1) + 1.0 + 16.0 * MIN_PAGES) / (2 * MIN_PAGES)
    assert tracker.revealed_value(group) == pytest.approx(expected)
    run = runs()  # the next run: the counts came through the state
    assert run.tracker.revealed_value(group) == pytest.approx(expected)
    assert read_state(tmp_path / "state.sqlite")["meta"]["revealed_values"] == {
        group: {'"high"': MIN_PAGES - 1, '"normal"': 1, "16.0": MIN_PAGES}}
