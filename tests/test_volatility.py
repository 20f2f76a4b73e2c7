"""Fields that change on nearly every visit: per-field hashes and the per-page-type verdict."""

from __future__ import annotations

import dataclasses
import doctest
import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import scrapy

from scrapy_costsched import volatility
from scrapy_costsched.pages import PageState
from scrapy_costsched.records import RecordHasher, UnhashableItem
from scrapy_costsched.volatility import MAX_FIELDS, MAX_PAGES, MIN_PAGES, WINDOW, VolatileFields

HASHER = RecordHasher({}, {}, {})
START = datetime(2026, 1, 1, tzinfo=timezone.utc)


class Product(scrapy.Item):
    name = scrapy.Field()
    price = scrapy.Field()
    scraped_at = scrapy.Field()


@dataclasses.dataclass
class ProductRecord:
    name: str
    price: float
    scraped_at: datetime


class Maker:
    """No stable form: its ``str`` is the default repr, with a memory address."""


def product(page: int, visit: int, price: float = 9.99) -> dict[str, Any]:
    return {"name": f"kettle {page}", "price": price, "scraped_at": START + timedelta(hours=visit)}


def crawl(fields: VolatileFields, hasher: RecordHasher, pages: int, visits: int,
          price_changes: tuple[int, ...] = (), vouched: bool = False) -> list[str]:
    """Visit each page *visits* times in turn (pages in *price_changes* get a new price each visit); the fields
    reported at the end. *vouched*: every answer carried the page's previous validator."""
    last: dict[int, list[dict[str, str]]] = {}
    for visit in range(visits):
        for page in range(pages):
            price = 9.99 + visit if page in price_changes else 9.99
            current = [hasher.field_hashes(product(page, visit, price))]
            fields.observe("Product", f"page {page}", last.get(page), current, vouched)
            last[page] = current
    reported = fields.report()
    assert all(page_type == "Product" for page_type, _ in reported)
    return [name for _, name in reported]


def test_a_timestamp_is_flagged_once_by_name() -> None:
    fields = VolatileFields()
    assert crawl(fields, HASHER, pages=10, visits=3) == ["scraped_at"]
    assert fields.volatile("Product") == ["scraped_at"]
    assert fields.volatile("Article") == []
    assert fields.counts("Product", "scraped_at") == (10, 10)
    assert fields.counts("Product", "price") == (0, 10)


def test_a_price_changing_on_one_page_in_ten_is_not_flagged() -> None:
    fields = VolatileFields()
    assert crawl(fields, RecordHasher({}, {"*": ("scraped_at",)}, {}), pages=10, visits=3, price_changes=(3,)) == []
    assert fields.volatile("Product") == []


def test_a_field_that_changed_while_the_validator_stayed_is_named_after_one_comparison() -> None:
    """The server said the page was as it was: a field that changed came from the spider's code or the clock,
    so one revisit of the pages tells (found on a recipe site: a day earlier than two comparisons)."""
    assert crawl(VolatileFields(), HASHER, pages=MIN_PAGES, visits=2) == []
    fields = VolatileFields()
    assert crawl(fields, HASHER, pages=MIN_PAGES, visits=2, vouched=True) == ["scraped_at"]
    assert fields.counts("Product", "scraped_at") == (MIN_PAGES, MIN_PAGES)
    assert fields.counts("Product", "price") == (0, MIN_PAGES)
    # The outcomes are kept apart in the state, so the next run's pages count from the same evidence.
    state = json.loads(json.dumps(fields.to_state()))
    assert state["Product"]["page 0"] == {"name": "2", "price": "2", "scraped_at": "3"}
    assert VolatileFields.from_state(state).volatile("Product") == ["scraped_at"]


def test_a_validator_that_never_moves_does_not_make_content_that_changes_on_some_pages_volatile() -> None:
    """A host whose ETag is the same whatever the page holds vouches for every answer: its pages' content changes on
    some of them only, and the page and type shares keep that apart from a timestamp."""
    fields = VolatileFields()
    ignoring = RecordHasher({}, {"*": ("scraped_at",)}, {})
    assert crawl(fields, ignoring, pages=3 * MIN_PAGES, visits=2, price_changes=tuple(range(MIN_PAGES)),
                 vouched=True) == []
    assert fields.counts("Product", "price") == (MIN_PAGES, 3 * MIN_PAGES)


def test_an_ignored_field_is_never_hashed_nor_flagged() -> None:
    for hasher in (RecordHasher({}, {"*": ("scraped_at",)}, {}), RecordHasher({}, {"dict": ("scraped_at",)}, {}),
                   RecordHasher({"*": ("name", "price")}, {}, {})):
        assert set(hasher.field_hashes(product(1, 1))) == {"name", "price"}
        fields = VolatileFields()
        assert crawl(fields, hasher, pages=10, visits=3) == []
        assert fields.volatile("Product") == []


def test_a_field_that_changes_on_a_third_of_the_pages_is_not_flagged_when_those_come_first() -> None:
    """The verdict is read at the end of the run: read after the first pages, the changing ones, it would
    name a field that changes on a third of the pages."""
    fields = VolatileFields()
    changing = range(MIN_PAGES + 1)
    for visit in range(3):
        for page in range(3 * len(changing)):
            previous = [{"comments": str(visit - 1 if page in changing else 0)}] if visit else None
            fields.observe("Recipe", str(page), previous, [{"comments": str(visit if page in changing else 0)}])
            if visit == 2 and page == len(changing) - 1:
                assert fields.volatile("Recipe") == ["comments"]  # what a verdict in mid-run would have said
    assert fields.report() == []
    assert fields.counts("Recipe", "comments") == (len(changing), 3 * len(changing))


def thread_page(page: int, visit: int, posts: int = 10, stamped: bool = False) -> list[dict[str, str]]:
    """A forum thread page as of a day: a post item each, with the forum's "N days ago" (found in a trial), and
    with *stamped* the time of scraping too."""
    stamp = {"scraped_at": START + timedelta(days=visit)} if stamped else {}
    return [HASHER.field_hashes({"post": f"{page}-{n}", "author": f"u{n % 3}", "text": f"post {n} of {page}",
                                 "ago": f"{visit + posts - n} days ago", **stamp}) for n in range(posts)]


def test_a_clock_in_every_item_of_pages_of_many_items_is_named() -> None:
    fields = VolatileFields()
    for visit in range(3):
        for page in range(MIN_PAGES):
            fields.observe("Thread", f"page {page}", thread_page(page, visit - 1) if visit else None,
                           thread_page(page, visit))
    assert fields.report() == [("Thread", "ago")]
    assert fields.counts("Thread", "ago") == (MIN_PAGES, MIN_PAGES)
    assert fields.counts("Thread", "text") == (0, 0)  # its items never paired while the clock moved


def test_two_clocks_in_every_item_are_both_named() -> None:
    fields = VolatileFields()
    for visit in range(3):
        for page in range(MIN_PAGES):
            fields.observe("Thread", f"page {page}", thread_page(page, visit - 1, stamped=True) if visit else None,
                           thread_page(page, visit, stamped=True))
    assert fields.report() == [("Thread", "ago"), ("Thread", "scraped_at")]
    assert fields.counts("Thread", "text") == (0, MIN_PAGES)


def test_items_that_come_and_go_and_a_price_that_moves_on_some_name_no_field() -> None:
    """A listing, newest first: each visit one item comes in, the oldest leaves, one listed price moves."""
    def listing(page: int, visit: int) -> list[dict[str, str]]:
        listed = range(visit, visit + 8)
        return [HASHER.field_hashes({"sku": f"{page}-{n}", "price": 10 + n + (visit if n == visit + 4 else 0)})
                for n in reversed(listed)]

    fields = VolatileFields()
    for visit in range(WINDOW):
        for page in range(MIN_PAGES):
            fields.observe("Listing", f"page {page}", listing(page, visit - 1) if visit else None,
                           listing(page, visit))
    assert fields.report() == []
    assert fields.counts("Listing", "price") == (0, MIN_PAGES)
    assert fields.counts("Listing", "sku") == (0, MIN_PAGES)


def test_fewer_than_min_pages_give_no_verdict() -> None:
    fields = VolatileFields()
    assert crawl(fields, HASHER, pages=MIN_PAGES - 1, visits=2 * WINDOW) == []
    assert fields.volatile("Product") == []


def test_the_verdict_survives_the_state_and_is_reported_once_per_run() -> None:
    fields = VolatileFields()
    crawl(fields, HASHER, pages=10, visits=3)
    state = json.loads(json.dumps(fields.to_state()))
    assert state["Product"]["page 0"] == {"name": "00", "price": "00", "scraped_at": "11"}

    restored = VolatileFields.from_state(state)
    assert restored.volatile("Product") == ["scraped_at"]
    assert restored.to_state() == state
    current = [HASHER.field_hashes(product(0, 3))]
    assert restored.report() == []  # no record of this run has the field yet
    restored.observe("Product", "page 0", [HASHER.field_hashes(product(0, 2))], current)
    assert restored.report() == [("Product", "scraped_at")]
    restored.observe("Product", "page 1", [HASHER.field_hashes(product(1, 2))], current)
    assert restored.report() == []
    # Left out of the hash since: the stored verdict names it, but it is not reported again.
    ignoring = RecordHasher({}, {"*": ("scraped_at",)}, {})
    after = VolatileFields.from_state(state)
    after.observe("Product", "page 0", None, [ignoring.field_hashes(product(0, 3))])
    assert after.report() == []


def test_the_sample_is_saved_again_only_after_it_changed() -> None:
    """Commits write the sample only when an observation changed it (it is rewritten whole)."""
    fields = VolatileFields()
    assert not fields.unsaved
    fields.observe("Product", "page 0", None, [HASHER.field_hashes(product(0, 0))])  # joins the sample
    assert fields.unsaved
    state = fields.to_state()
    assert not fields.unsaved
    sampled = [f"page {page}" for page in range(MAX_PAGES)]
    for key in sampled[1:]:
        fields.observe("Product", key, None, [HASHER.field_hashes(product(0, 0))])
    fields.to_state()
    fields.observe("Product", "not sampled", [HASHER.field_hashes(product(0, 0))], [HASHER.field_hashes(product(0, 1))])
    assert not fields.unsaved  # the sample is full and this page is not in it
    fields.observe("Product", "page 0", [HASHER.field_hashes(product(0, 0))], [HASHER.field_hashes(product(0, 1))])
    assert fields.unsaved
    assert not VolatileFields.from_state(state).unsaved


def test_malformed_state_is_skipped() -> None:
    state = {"Product": {"a": {"f": "14"}, "b": ["f"], "c": {"f": 3, "g": ""}, "d": {"f": "0110"}}, "Article": 1}
    assert VolatileFields.from_state(state).to_state() == {"Product": {"a": {}, "c": {}, "d": {"f": "0110"}}}


def test_a_field_is_compared_only_when_both_visits_have_it() -> None:
    fields = VolatileFields()
    for page in range(10):
        for visit in range(3):
            previous = [{"name": "a"}] if visit else None
            current = [{"name": "a", "scraped_at": str(visit)} if visit == 2 else {"name": "a"}]
            fields.observe("Product", str(page), previous, current)
    assert fields.report() == []
    assert set(fields.to_state()["Product"]["0"]) == {"name"}


def test_a_page_that_stops_changing_leaves_the_verdict_within_the_window() -> None:
    fields = VolatileFields()
    for visit in range(WINDOW + 2):
        previous = [{"status": str(min(visit - 1, 4))}] if visit else None
        for page in range(MIN_PAGES):
            fields.observe("Product", str(page), previous, [{"status": str(min(visit, 4))}])
        if visit == 2:
            assert fields.volatile("Product") == ["status"]
    assert fields.volatile("Product") == []
    assert fields.to_state()["Product"]["0"]["status"] == "1110000000"


def test_memory_is_bounded() -> None:
    fields = VolatileFields()
    many = {f"field {n}": "x" for n in range(MAX_FIELDS + 10)}
    for page in range(MAX_PAGES + 50):
        fields.observe("Product", str(page), [many], [many])
    pages = fields.to_state()["Product"]
    assert len(pages) == MAX_PAGES
    assert all(len(page) == MAX_FIELDS for page in pages.values())
    assert fields.sampled("Product", "0")
    assert not fields.sampled("Product", str(MAX_PAGES))
    assert not fields.sampled("Article", "0")


def test_field_hashes_are_the_same_across_hashers_and_kinds_of_item() -> None:
    record = product(1, 1)
    hashes = HASHER.field_hashes(record)
    assert set(hashes) == {"name", "price", "scraped_at"}
    assert all(len(value) == 8 for value in hashes.values())
    assert RecordHasher({}, {}, {}).field_hashes(dict(record)) == hashes
    assert HASHER.field_hashes(Product(**record)) == hashes
    assert HASHER.field_hashes(ProductRecord(**record)) == hashes
    assert HASHER.field_hashes(product(1, 2))["scraped_at"] != hashes["scraped_at"]
    assert HASHER.field_hashes({"specs": {1: "a", "1": "b"}, "tags": {"b", "a"}}) == {
        "specs": HASHER.field_hashes({"specs": {"1": "b", 1: "a"}})["specs"],
        "tags": HASHER.field_hashes({"tags": ["a", "b"]})["tags"],
    }


def test_field_hashes_raise_as_the_item_hash_does() -> None:
    item = {"name": "kettle", "maker": Maker()}
    with pytest.raises(UnhashableItem) as from_item:
        HASHER.item_hash(item)
    with pytest.raises(UnhashableItem) as from_fields:
        HASHER.field_hashes(item)
    assert from_fields.value.field == from_item.value.field == "maker"
    assert str(from_fields.value) == str(from_item.value)
    assert set(RecordHasher({}, {"*": ("maker",)}, {}).field_hashes(item)) == {"name"}


def test_module_doctest() -> None:
    assert doctest.testmod(volatility).failed == 0


def test_a_page_stored_with_its_one_item_s_field_hashes_reads_them_as_its_record() -> None:
    """Versions that compared pages of one item only stored that item's hashes."""
    stored = PageState(url="http://shop.example/p/1", host="shop.example", page_type="Product", value="normal",
                       first_seen=0.0).to_json()
    stored["field_hashes"] = {"name": "00", "price": "11"}
    assert PageState.from_json(json.loads(json.dumps(stored))).field_hashes == [{"name": "00", "price": "11"}]
