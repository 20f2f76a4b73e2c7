"""Records, hashing and change detection, driven through the spider middleware and the pipeline."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from scrapy import Request

from tests.components import Product

URL = "http://shop.example/p/1"


def test_one_observation_per_visit_baseline_unchanged_changed(runs: Any) -> None:
    runs().visit(URL, [Product("a", 1.0), Product("b", 2.0)])
    second = runs()
    second.visit(URL, [Product("b", 2.0), Product("a", 1.0)])  # order does not matter
    assert second.stats["costsched/unchanged"] == 1
    third = runs()
    third.visit(URL, [Product("a", 1.5), Product("b", 2.0)])
    assert third.stats["costsched/changed"] == 1
    page = third.page(URL)
    assert (page.visits, page.changes) == (3, 1)
    assert page.stats.visits == pytest.approx(2.0, rel=0.05)  # two intervals observed, slightly decayed
    assert page.estimate is not None


def test_ignored_fields_do_not_make_a_change(runs: Any) -> None:
    runs(COSTSCHED_IGNORE_FIELDS={"Product": ["ts"]}).visit(URL, [Product("a", 1.0, ts="08:00")])
    run = runs(COSTSCHED_IGNORE_FIELDS={"Product": ["ts"]})
    run.visit(URL, [Product("a", 1.0, ts="09:00")])
    assert run.stats["costsched/unchanged"] == 1


def test_volatile_fields_are_changes_unless_ignored(runs: Any) -> None:
    runs().visit(URL, [Product("a", 1.0, ts="08:00")])
    run = runs()
    run.visit(URL, [Product("a", 1.0, ts="09:00")])
    assert run.stats["costsched/changed"] == 1


def test_hash_fields_keep_only_what_matters(runs: Any) -> None:
    runs(COSTSCHED_HASH_FIELDS=["price"]).visit(URL, [Product("a", 1.0, name="old")])
    run = runs(COSTSCHED_HASH_FIELDS=["price"])
    run.visit(URL, [Product("a", 1.0, name="new")])
    assert run.stats["costsched/unchanged"] == 1


def test_changed_hash_configuration_rebaselines_instead_of_counting_changes(runs: Any) -> None:
    runs().visit(URL, [Product("a", 1.0, ts="08:00")])
    run = runs(COSTSCHED_IGNORE_FIELDS=["ts"])
    run.visit(URL, [Product("a", 1.0, ts="09:00")])
    assert run.stats["costsched/rebaseline"] == 1
    assert "costsched/changed" not in run.stats
    assert run.page(URL).changes == 0


def test_drop_unchanged_passes_only_changed_items(runs: Any) -> None:
    runs(COSTSCHED_DROP_UNCHANGED=True).visit(URL, [Product("a", 1.0), Product("b", 2.0)])
    run = runs(COSTSCHED_DROP_UNCHANGED=True)
    kept = run.visit(URL, [Product("a", 1.0), Product("b", 2.5)])
    assert kept == [Product("b", 2.5)]
    assert run.stats["costsched/changed"] == 1  # the record still holds both items


def test_item_key_compares_items_one_by_one(runs: Any) -> None:
    settings = {"COSTSCHED_DROP_UNCHANGED": True, "COSTSCHED_ITEM_KEY": "sku"}
    runs(**settings).visit(URL, [Product("a", 1.0), Product("b", 2.0)])
    run = runs(**settings)
    # "a" now has b's old price: as a multiset member it looks seen, by key it changed.
    kept = run.visit(URL, [Product("a", 2.0, name="kettle"), Product("b", 2.0)])
    assert [item.sku for item in kept] == ["a"]
    assert run.stats["costsched/items/changed"] == 1
    assert run.stats["costsched/items/unchanged"] == 1


def test_pages_without_items_are_recorded_by_their_outlinks(runs: Any) -> None:
    hub = "http://shop.example/category/1"
    runs().visit(hub, [Request("http://shop.example/p/1"), Request("http://shop.example/p/2")])
    run = runs()
    run.visit(hub, [Request("http://shop.example/p/2"), Request("http://shop.example/p/1")])
    assert run.stats["costsched/unchanged"] == 1
    run = runs()
    run.visit(hub, [Request("http://shop.example/p/2"), Request("http://shop.example/p/3")])
    assert run.stats["costsched/changed"] == 1
    assert run.page(hub).record_kind == "links"


def test_a_page_that_stops_yielding_items_is_flagged_not_changed(runs: Any, caplog: pytest.LogCaptureFixture) -> None:
    urls = [f"http://shop.example/p/{n}" for n in range(1, 4)]
    first = runs()
    for url in urls:
        first.visit(url, [Product(url, 1.0)])
    run = runs()
    for url in urls:  # a selector that stopped matching: every page of the kind
        run.visit(url, [])
    assert run.stats["costsched/extraction_empty"] == 3
    assert "costsched/changed" not in run.stats
    assert run.page(URL).record_kind == "items"
    run.close()  # no page of the type yielded its items: said once, at the end of the run
    warned = [r.getMessage() for r in caplog.records if "yielded no items" in r.getMessage() and r.levelname == "WARNING"]
    assert warned == [(f"costsched: 'Product' pages that yielded no items this time, though they used to: 3 ({urls[0]} "
                       "first), and 0 of the type yielded any; not counted as changes. A selector that stopped "
                       "matching does this to every page of a kind: such pages are counted in "
                       "costsched/extraction_empty and listed at DEBUG")]
    assert run.page(urls[0]).empty_strikes == 0


def test_pages_that_answer_304_count_as_pages_of_the_type_that_kept_their_items(
        runs: Any, caplog: pytest.LogCaptureFixture) -> None:
    """On a host with validators most visits of a type that kept its items are 304s: they say the extraction is
    not what emptied the one page that came back without its items, which is struck as a page gone."""
    caplog.set_level(logging.INFO, logger="scrapy_costsched")
    urls = [f"http://shop.example/p/{n}" for n in range(1, 5)]
    first = runs()
    for url in urls:
        first.visit(url, [Product(url, 1.0)])
    run = runs()
    for url in urls[:3]:
        run.not_modified(url)
    run.visit(urls[3], [])
    run.close()
    assert run.page(urls[3]).empty_strikes == 1
    assert not [r for r in caplog.records if r.levelname == "WARNING" and "yielded no items" in r.getMessage()]
    assert any("pages that yielded none of the items they used to: 1" in r.getMessage() for r in caplog.records)


def test_a_page_whose_items_fail_in_a_pipeline_is_not_blamed_on_a_selector(
        runs: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Found in a trial: a pipeline written for a newer Scrapy raised on every item, and the warning said a
    selector had stopped matching."""
    urls = [f"http://shop.example/p/{n}" for n in range(1, 4)]
    first = runs()
    for url in urls:
        first.visit(url, [Product(url, 1.0)])
    run = runs()
    for url in urls:
        run.visit(url, [Product(url, 2.0)], pipeline_error=True)
    assert run.stats["costsched/extraction_empty"] == 3
    assert "costsched/changed" not in run.stats
    assert run.page(urls[0]).record == first.page(urls[0]).record
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "costsched:" in r.getMessage()]
    assert warned == [(f"costsched: {urls[0]} had every item it yielded dropped or failed in the item pipelines "
                       "this time (it used to record items); not counted as a change. A pipeline that drops or fails "
                       "on every item (its errors are logged above) does this to every page of a kind: such pages are "
                       "counted in costsched/extraction_empty and listed at DEBUG, this is said once per page type "
                       "('Product')")]


def test_value_tiers_and_several_parents_keep_the_highest(runs: Any) -> None:
    run = runs()
    run.visit(URL, [Product("a", 1.0)], meta={"costsched_value": "high"})
    run.visit(URL, [Product("a", 1.0)], meta={"costsched_value": "low"})
    assert run.page(URL).value == "high"
    run.visit(URL, [Product("a", 1.0)], meta={"costsched_value": "gold"})
    assert run.stats["costsched/invalid/costsched_value"] == 1
    assert run.page(URL).value == "high"


def test_a_tag_changed_in_the_spider_takes_effect_at_the_next_run(runs: Any) -> None:
    """Found on a shop trial: listing pages tagged "low" as the docs advise kept the "normal" of their first runs.
    The first value a run gives a page replaces the stored one; later ones in the run only raise it."""
    runs().visit(URL, [Product("a", 1.0)], meta={"costsched_value": "high"})
    run = runs()
    run.visit(URL, [Product("a", 1.0)])  # untagged (a parent that gives no value): the page keeps its own
    assert run.page(URL).value == "high"
    run.visit(URL, [Product("a", 1.0)], meta={"costsched_value": "low"})
    assert run.page(URL).value == "low"
    run.visit(URL, [Product("a", 1.0)], meta={"costsched_value": "normal"})
    run.visit(URL, [Product("a", 1.0)], meta={"costsched_value": "low"})
    assert run.page(URL).value == "normal"
    hooked = runs()
    hooked.crawler.spider.costsched_value = lambda source: 0.5 if isinstance(source, Product) else None
    hooked.visit(URL, [Product("a", 1.0)])  # an item hook's value counts as the spider's word too
    assert hooked.page(URL).value == 0.5


def test_an_invalid_meta_value_is_counted_each_time_and_said_once(runs: Any, caplog: pytest.LogCaptureFixture) -> None:
    run = runs()
    for n in range(1, 4):
        run.visit(f"http://shop.example/p/{n}", [Product(str(n), 1.0)],
                  meta={"costsched_value": "gold", "costsched_page_type": 5, "costsched_cost": -1})
    run.visit("http://shop.example/p/4", [Product("4", 1.0)], meta={"costsched_value": "silver"})
    for meta_key, uses in (("costsched_value", 4), ("costsched_page_type", 3), ("costsched_cost", 3)):
        assert run.stats[f"costsched/invalid/{meta_key}"] == uses, meta_key
    warned = [r.getMessage() for r in caplog.records if "ignoring invalid" in r.getMessage()]
    assert sorted(message.split(" (")[0] for message in warned) == [
        "costsched: ignoring invalid costsched_cost -1", "costsched: ignoring invalid costsched_page_type 5",
        "costsched: ignoring invalid costsched_value 'gold'", "costsched: ignoring invalid costsched_value 'silver'"]


def test_an_unhashable_field_is_counted_per_item_and_said_once_per_field(runs: Any,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    run = runs()
    passed = [run.visit(f"http://shop.example/p/{n}", [{"sku": str(n), "maker": object()}]) for n in range(1, 4)]
    assert [len(items) for items in passed] == [1, 1, 1]  # every item reaches the feed
    assert run.stats["costsched/items/unhashable"] == 3
    warned = [r.getMessage() for r in caplog.records if "cannot hash field" in r.getMessage()]
    assert len(warned) == 1
    assert "cannot hash field 'maker' of dict" in warned[0]


def test_spider_hook_sets_value_from_items(runs: Any) -> None:
    run = runs()
    run.crawler.spider.costsched_value = lambda source: 9.0 if isinstance(source, Product) else None
    run.visit(URL, [Product("a", 1.0)])
    assert run.page(URL).value == 9.0


def test_a_page_is_written_once_a_visit_when_a_commit_falls_between_its_answer_and_its_observation(
        runs: Any) -> None:
    """The answer's bytes wait for the visit's observation, so a commit of other visits' observations in
    between (one every ``COSTSCHED_COMMIT_EVERY``) does not write the page a first time, half-updated."""
    runs().visit(URL, [Product("a", 1.0)])
    run = runs()
    assert run.tracker.store is not None
    store, written = run.tracker.store, []
    put_page = store.put_page

    def spy(fingerprint: str, page: dict[str, Any], summary: list[Any]) -> None:
        written.append(fingerprint)
        put_page(fingerprint, page, summary)

    store.put_page = spy
    run.visit(URL, [Product("a", 1.0)], downloaded=run.tracker.commit)
    run.tracker.commit()
    assert written == [run.tracker.fingerprint(Request(URL))]
    page = run.page(URL)
    assert page.full_bytes is not None
    assert page.full_bytes.count == 1
    assert run.stats["costsched/unchanged"] == 1
