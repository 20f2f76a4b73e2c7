"""The demo site: seeded catalog, exact freshness scoring, HTTP server, and the demo spider's parsing."""

from __future__ import annotations

import itertools
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from email.utils import formatdate, parsedate_to_datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

PROJECT = Path(__file__).resolve().parents[1] / "example_project"
if str(PROJECT) not in sys.path:
    sys.path.insert(0, str(PROJECT))

from demo_site import clock
from demo_site.catalog import DAY, EPOCH0, RATE_BUCKETS, TIERS, Catalog, Product
from demo_site.evaluate import Dataset, ScrapeMismatch, freshness, parse_price
from demo_site.server import (
    HostMap,
    SiteServer,
    Throttle,
    ThrottleGate,
    parse_host_spec,
    parse_throttle_spec,
    parse_throttles,
    render,
    serve_in_thread,
)
from demo_site.wire import read_byte_log

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

WEIGHTS = {"low": 0.25, "normal": 1.0, "high": 4.0, "critical": 16.0}


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.generate(products=300, categories=10, seed=1, horizon_days=60)


# -- catalog -----------------------------------------------------------------------------------



def _stop(proc: subprocess.Popen[str]) -> None:
    """Kill *proc* if a failed assertion left it running, and close its pipes."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()

def test_generate_is_reproducible(catalog: Catalog) -> None:
    again = Catalog.generate(products=300, categories=10, seed=1, horizon_days=60)
    assert again == catalog
    other = Catalog.generate(products=300, categories=10, seed=2, horizon_days=60)
    assert [p.rate for p in other.products] != [p.rate for p in catalog.products]


def test_initial_mix_is_exact(catalog: Catalog) -> None:
    initial = catalog.existing(EPOCH0)
    assert len(initial) == 300
    assert [sum(p.tier == t for p in initial) for t in TIERS] == [30, 60, 120, 90]
    per_bucket = [sum(lo <= p.rate <= hi for p in initial) for _, lo, hi in RATE_BUCKETS]
    assert per_bucket == [69, 45, 48, 48, 90]
    per_category = [sum(p.category == c for p in initial) for c in range(10)]
    assert per_category == [30] * 10


def test_new_products_arrive_over_the_horizon(catalog: Catalog) -> None:
    assert len(catalog.products) == 300 + 180  # 1% of 300 per day for 60 days
    new = catalog.products[300:]
    assert all(EPOCH0 < p.created <= catalog.end for p in new)
    assert [p.created for p in new] == sorted(p.created for p in new)
    grown = [len(catalog.existing(EPOCH0 + d * DAY)) - 300 for d in (10, 30, 59)]
    assert 15 <= grown[0] <= 45
    assert 70 <= grown[1] <= 110
    assert 150 <= grown[2] <= 180
    late = new[-1]
    assert catalog.content_at(late, late.created - 1) is None
    assert catalog.content_at(late, late.created) is not None


def test_versions_are_monotonic_and_every_version_looks_different(catalog: Catalog) -> None:
    times = [EPOCH0 + h * 3600.0 for h in range(0, 60 * 24, 7)]
    for product in catalog.products[::7]:
        versions = [catalog.version_at(product, t) for t in times]
        assert versions == sorted(versions)
        assert catalog.version_at(product, catalog.end) == len(product.changes)
        contents = [catalog.content(product, v) for v in range(len(product.changes) + 1)]
        assert len({c.price_cents for c in contents}) == len(contents)  # no price collision, ever
        assert len({c.name for c in contents}) == 1
    assert catalog.content(catalog.product(5), 3) == catalog.content(catalog.product(5), 3)


def test_change_times_and_version_boundaries(catalog: Catalog) -> None:
    product = max(catalog.products[:300], key=lambda p: p.rate)
    first, second = product.changes[:2]
    assert first == int(first)  # whole seconds
    assert second > first
    assert catalog.version_at(product, first - 1) == 0
    assert catalog.version_at(product, first) == 1
    assert catalog.version_end(product, 0) == first
    assert catalog.version_end(product, len(product.changes)) == math.inf
    assert catalog.last_modified(product, first + 10) == first
    assert catalog.last_modified(product, first - 1) == product.created


def test_listing_contents(catalog: Catalog) -> None:
    t = EPOCH0 + 20.5 * DAY
    listed = [catalog.listing_at(c, t) for c in range(catalog.categories)]
    for c, products in enumerate(listed):
        assert [p.id for p in products] == sorted(p.id for p in catalog.products if p.category == c and p.created <= t)
    assert sorted(p.id for ps in listed for p in ps) == [p.id for p in catalog.existing(t)]
    newcomer = next(p for p in catalog.products if p.created > t)
    c = newcomer.category
    before = catalog.listing_version_at(c, newcomer.created - 1)
    assert catalog.listing_version_at(c, newcomer.created) == before + 1
    assert catalog.listing_last_modified(c, newcomer.created) == newcomer.created
    with pytest.raises(IndexError):
        catalog.listing_at(catalog.categories, t)


def test_empirical_change_rate_matches_lambda(catalog: Catalog) -> None:
    # Per product: event counts are Poisson(lambda * T); a 5-sigma band never fails by chance here.
    for p in catalog.products:
        expected = p.rate * (catalog.end - p.created) / DAY
        assert abs(len(p.changes) - expected) <= 5 * math.sqrt(expected) + 3
    # In aggregate over the fast bucket the estimate is tight (one-second rounding is negligible).
    fast = [p for p in catalog.products if p.rate >= 1.0]
    observed = sum(len(p.changes) for p in fast)
    expected = sum(p.rate * (catalog.end - p.created) / DAY for p in fast)
    assert observed == pytest.approx(expected, rel=0.03)


def test_generate_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="products >= 1"):
        Catalog.generate(products=0)
    with pytest.raises(ValueError, match="new_per_day"):
        Catalog.generate(new_per_day=-1)


# -- exact freshness ---------------------------------------------------------------------------


def _item(catalog: Catalog, pid: int, t: float) -> dict[str, object]:
    product = catalog.product(pid)
    content = catalog.content_at(product, t)
    assert content is not None
    return {
        "url": f"http://x/product/{pid}",
        "product_id": pid,
        "name": content.name,
        "price": content.price_text,
        "stock": content.stock,
        "category": product.category,
    }


def test_parse_price() -> None:
    assert parse_price("12.34") == 1234
    assert parse_price("$0.05") == 5
    with pytest.raises(ValueError, match="not a price"):
        parse_price("12.3")


def test_freshness_is_exact() -> None:
    small = Catalog.generate(products=20, categories=2, seed=3, horizon_days=10, new_per_day=0.5)
    t0 = EPOCH0 + 2 * DAY
    t1 = t0 + DAY
    empty = freshness(small, Dataset(), t0, t1, WEIGHTS)
    assert empty.weighted == 0.0
    assert empty.unweighted == 0.0

    full = Dataset()
    counts = full.update(small, [_item(small, p.id, t0) for p in small.existing(t0)], t0)
    assert counts.new == len(small.existing(t0))
    assert counts.changed == 0
    num = den = 0.0
    for p in small.existing(t1):
        if p.created >= t1:
            continue
        begin = max(t0, p.created)
        copy_fresh = 0.0
        if p.created <= t0:  # only products that existed at t0 were scraped
            nxt = next((c for c in p.changes if c > t0), math.inf)
            copy_fresh = min(nxt, t1) - t0
        num += WEIGHTS[p.tier] * copy_fresh
        den += WEIGHTS[p.tier] * (t1 - begin)
    assert freshness(small, full, t0, t1, WEIGHTS).weighted == pytest.approx(num / den, rel=1e-12)

    # A copy made a day earlier is fresh only until the first change after that earlier scrape.
    old = Dataset()
    earlier = t0 - DAY
    old.update(small, [_item(small, p.id, earlier) for p in small.existing(earlier)], earlier)
    assert freshness(small, old, t0, t1, WEIGHTS).weighted <= freshness(small, full, t0, t1, WEIGHTS).weighted


def test_freshness_of_part_of_the_site_counts_only_its_products() -> None:
    """The demo scores the hosts that do not throttle on their own: the rest weighs nothing."""
    small = Catalog.generate(products=20, categories=2, seed=3, horizon_days=10, new_per_day=0.5)
    t0 = EPOCH0 + 2 * DAY
    half = Dataset()
    half.update(small, [_item(small, p.id, t0) for p in small.existing(t0) if p.id % 2 == 0], t0)
    even = freshness(small, half, t0, t0 + DAY, WEIGHTS, include=lambda p: p.id % 2 == 0)
    odd = freshness(small, half, t0, t0 + DAY, WEIGHTS, include=lambda p: p.id % 2 == 1)
    every = freshness(small, half, t0, t0 + DAY, WEIGHTS)
    assert odd.weighted == 0.0
    assert even.weighted > every.weighted > 0.0
    assert even.products + odd.products == every.products
    assert freshness(small, half, t0, t0 + DAY, WEIGHTS, include=lambda p: True) == every


def test_dataset_counts_changes_and_rejects_wrong_items(catalog: Catalog) -> None:
    product = max(catalog.products[:300], key=lambda p: p.rate)
    t0, t1 = EPOCH0 + 3600, EPOCH0 + DAY
    assert catalog.version_at(product, t1) > catalog.version_at(product, t0)
    data = Dataset()
    assert data.update(catalog, [_item(catalog, product.id, t0)], t0).new == 1
    assert data.update(catalog, [_item(catalog, product.id, t0)], t0).unchanged == 1
    assert data.update(catalog, [_item(catalog, product.id, t1)], t1).changed == 1
    stale = _item(catalog, product.id, t0)
    with pytest.raises(ScrapeMismatch, match=f"product {product.id}"):
        data.update(catalog, [stale], t1)  # the site served a newer version at t1


# -- clock and server --------------------------------------------------------------------------


def test_clock_reads_the_shared_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(clock.CLOCK_ENV, raising=False)
    assert abs(clock.now() - time.time()) < 5
    path = tmp_path / "clock"
    clock.set_clock(path, EPOCH0 + 1.5)
    monkeypatch.setenv(clock.CLOCK_ENV, str(path))
    assert clock.now() == EPOCH0 + 1.5
    path.write_text("soon")
    with pytest.raises(ValueError, match="expected epoch seconds"):
        clock.now()


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, dict(exc.headers), exc.read().decode()


def test_server_serves_the_catalog_at_the_clock_time(
    catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock_file = tmp_path / "clock"
    t = EPOCH0 + 3600
    clock.set_clock(clock_file, t)
    monkeypatch.setenv(clock.CLOCK_ENV, str(clock_file))
    server, url = serve_in_thread(catalog)
    try:
        status, _, body = _get(url + "/")
        assert status == 200
        assert body.count('class="category"') == catalog.categories
        assert _get(url + "/robots.txt")[2] == "User-agent: *\nAllow: /\n"

        status, _, body = _get(url + "/category/3")
        assert status == 200
        for p in catalog.listing_at(3, t):
            assert f'<a class="product" href="/product/{p.id}" data-tier="{p.tier}">' in body
        assert _get(url + "/category/99")[0] == 404

        product = max(catalog.products[:300], key=lambda p: p.rate)
        content = catalog.content_at(product, t)
        assert content is not None
        status, headers, body = _get(f"{url}/product/{product.id}")
        assert status == 200
        assert f'<span class="price">{content.price_text}</span>' in body
        assert f'<span class="stock">{content.stock}</span>' in body
        assert headers["Date"] == formatdate(t, usegmt=True)  # the simulated clock, not the wall clock
        etag, last_modified = headers["ETag"], headers["Last-Modified"]
        assert _get(f"{url}/product/{product.id}", {"If-None-Match": etag})[0] == 304
        assert _get(f"{url}/product/{product.id}", {"If-Modified-Since": last_modified})[0] == 304

        unborn = catalog.products[-1]
        assert _get(f"{url}/product/{unborn.id}")[0] == 404
        assert _get(f"{url}/product/0")[0] == 404

        later = catalog.version_end(product, catalog.version_at(product, t))  # the next change
        clock.set_clock(clock_file, later)
        assert _get(f"{url}/product/{product.id}", {"If-None-Match": etag})[0] == 200
        assert _get(f"{url}/product/{product.id}", {"If-Modified-Since": last_modified})[0] == 200
    finally:
        server.close()


def test_server_module_prints_its_url_and_stops_on_sigterm(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(PROJECT), DEMO_CLOCK_FILE=str(tmp_path / "clock"))
    clock.set_clock(tmp_path / "clock", EPOCH0)
    proc = subprocess.Popen(
        [sys.executable, "-m", "demo_site", "--products", "20", "--categories", "2"],
        cwd=PROJECT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("DEMO_SITE http://127.0.0.1:")
        assert _get(line.split()[1] + "/category/1")[0] == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        _stop(proc)


# -- the demo spider's parsing (no crawl) ------------------------------------------------------


def test_spider_parses_listing_and_product_pages(catalog: Catalog) -> None:
    from demo_shop.items import Product
    from demo_shop.spiders.shop import ShopSpider
    from scrapy.http import HtmlResponse

    t = EPOCH0 + 3600
    spider = ShopSpider(site="http://shop.test/", categories="10")
    listing = HtmlResponse("http://shop.test/category/2", body=render(catalog, "/category/2", t).body, encoding="utf-8")
    requests = list(spider.parse(listing))
    listed = catalog.listing_at(2, t)
    assert [r.url for r in requests] == [f"http://shop.test/product/{p.id}" for p in listed]
    assert [r.meta["costsched_value"] for r in requests] == [p.tier for p in listed]
    assert {r.meta["costsched_page_type"] for r in requests} == {"product"}
    assert all(r.callback == spider.parse_product for r in requests)
    assert list(ShopSpider(site="http://shop.test", follow="0").parse(listing)) == []

    product = listed[0]
    page = HtmlResponse(
        f"http://shop.test/product/{product.id}",
        body=render(catalog, f"/product/{product.id}", t).body,
        encoding="utf-8",
    )
    (item,) = spider.parse_product(page)
    content = catalog.content_at(product, t)
    assert content is not None
    assert item == Product(
        url=page.url,
        product_id=product.id,
        name=content.name,
        price=content.price_text,
        stock=content.stock,
        category=product.category,
    )


@pytest.mark.parametrize("mode", ["honest", "volatile", "frozen"])
def test_server_last_modified_modes(catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    mode: str) -> None:
    clock_file = tmp_path / "clock"
    product = max(catalog.products[:300], key=lambda p: p.rate)
    t = catalog.version_end(product, 0) + 3600.0  # after the product's first change
    clock.set_clock(clock_file, t)
    monkeypatch.setenv(clock.CLOCK_ENV, str(clock_file))
    server, url = serve_in_thread(catalog, last_modified=mode)
    try:
        headers = _get(f"{url}/product/{product.id}")[1]
        expected = {"honest": catalog.last_modified(product, t), "volatile": t, "frozen": catalog.start}[mode]
        assert headers["Last-Modified"] == formatdate(expected, usegmt=True)
    finally:
        server.close()
    with pytest.raises(ValueError, match="last_modified must be one of"):
        serve_in_thread(catalog, last_modified="sometimes")


# -- hosts with validator modes, and the byte log ------------------------------------------------

MODES = ("honour", "ignore", "rotate", "false304", "none")


@pytest.fixture
def multi_site(catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MultiSite]:
    """Five hosts, one per validator mode, with a byte log, at a time before a change of each test page."""
    clock_file = tmp_path / "clock"
    monkeypatch.setenv(clock.CLOCK_ENV, str(clock_file))
    log = tmp_path / "bytes.jsonl"
    site, url = serve_in_thread(catalog, hosts=MODES, byte_log=log)
    try:
        yield MultiSite(catalog, site, url, clock_file, log)
    finally:
        site.close()


class MultiSite:
    def __init__(self, catalog: Catalog, site: SiteServer, url: str, clock_file: Path, log: Path) -> None:
        self.catalog, self.site, self.url, self.clock_file, self.log = catalog, site, url, clock_file, log
        self.t = EPOCH0 + 3600
        clock.set_clock(clock_file, self.t)
        self._offset = 0

    def product(self, mode: str) -> Product:
        """The fastest-changing initial product on *mode*'s host (it changes within hours)."""
        ids = self.site.products_on(mode, self.catalog, EPOCH0)
        return max((self.catalog.product(pid) for pid in ids), key=lambda p: p.rate)

    def url_of(self, product: Product) -> str:
        return self.site.product_url(product.id)

    def after_next_change(self, product: Product) -> None:
        clock.set_clock(self.clock_file, self.catalog.version_end(product, self.catalog.version_at(product, self.t)))

    def records(self) -> list[dict[str, Any]]:
        """Byte log records since the last call."""
        records, self._offset = read_byte_log(self.log, self._offset)
        return records


def test_hosts_are_distinct_addresses_and_listings_link_products_on_every_host(multi_site: MultiSite) -> None:
    site, catalog = multi_site.site, multi_site.catalog
    assert site.modes == MODES
    assert [urllib.parse.urlsplit(u).hostname for u in site.urls] == [f"127.0.0.{i}" for i in range(1, 6)]
    assert site.url == multi_site.url == site.url_for("honour") == site.urls[0]
    with pytest.raises(KeyError):
        site.url_for("sometimes")
    status, _, body = _get(multi_site.url + "/category/0")
    assert status == 200
    hrefs = re.findall(r'class="product" href="([^"]+)"', body)
    listed = catalog.listing_at(0, multi_site.t)
    assert hrefs == [p.path if p.id % 5 == 0 else site.product_url(p.id) for p in listed]
    everywhere = {urllib.parse.urlsplit(h).hostname for c in range(catalog.categories)
                  for h in re.findall(r'class="product" href="([^"]+)"', _get(f"{site.url}/category/{c}")[2])}
    assert everywhere == {None, "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}  # None: relative, main host
    for url in site.urls:
        assert _get(url + "/robots.txt")[0] == 200
    assert _get(site.url_for("ignore") + "/category/0")[0] == 404  # listings live on the main host only
    product = multi_site.product("rotate")
    status, _, body = _get(multi_site.url_of(product))
    assert status == 200
    assert f'<a class="category" href="{site.url}/category/{product.category}">' in body
    assert _get(f"{site.url}/product/{product.id}")[0] == 404  # a product lives on one host only


def test_honour_answers_304_only_when_nothing_changed(multi_site: MultiSite) -> None:
    product = multi_site.product("honour")
    url = multi_site.url_of(product)
    status, headers, _ = _get(url)
    assert status == 200
    etag, modified = headers["ETag"], headers["Last-Modified"]
    old_date = formatdate(product.created - DAY, usegmt=True)
    assert _get(url, {"If-None-Match": etag})[0] == 304
    assert _get(url, {"If-None-Match": f'"x", W/{etag}'})[0] == 304
    assert _get(url, {"If-Modified-Since": modified})[0] == 304
    assert _get(url, {"If-None-Match": '"p0-v0"', "If-Modified-Since": modified})[0] == 200  # If-None-Match wins
    assert _get(url, {"If-None-Match": etag, "If-Modified-Since": old_date})[0] == 304
    multi_site.after_next_change(product)
    assert _get(url, {"If-None-Match": etag})[0] == 200
    assert _get(url, {"If-Modified-Since": modified})[0] == 200
    records = multi_site.records()
    assert [(r["status"], r["conditional"], r["changed_since_validators"]) for r in records] == [
        (200, False, None), (304, True, False), (304, True, False), (304, True, False), (200, True, False),
        (304, True, False), (200, True, True), (200, True, True),
    ]  # fmt: skip
    assert {(r["host"], r["mode"], r["path"]) for r in records} == {("127.0.0.1", "honour", product.path)}


def test_ignore_sends_validators_but_always_answers_in_full(multi_site: MultiSite) -> None:
    product = multi_site.product("ignore")
    url = multi_site.url_of(product)
    status, headers, body = _get(url)
    assert status == 200
    assert headers["ETag"] == f'"p{product.id}-v{multi_site.catalog.version_at(product, multi_site.t)}"'
    assert headers["Last-Modified"] == formatdate(multi_site.catalog.last_modified(product, multi_site.t),
                                                  usegmt=True)
    both = {"If-None-Match": headers["ETag"], "If-Modified-Since": headers["Last-Modified"]}
    for validators in ({"If-None-Match": headers["ETag"]}, {"If-Modified-Since": headers["Last-Modified"]}, both):
        status, again, again_body = _get(url, validators)
        assert (status, again_body) == (200, body)
        assert (again["ETag"], again["Last-Modified"]) == (headers["ETag"], headers["Last-Modified"])
    assert {(r["status"], r["changed_since_validators"]) for r in multi_site.records()[1:]} == {(200, False)}


def test_rotate_changes_the_etag_every_time_and_honours_only_dates(multi_site: MultiSite) -> None:
    product = multi_site.product("rotate")
    url = multi_site.url_of(product)
    first, second = _get(url)[1], _get(url)[1]
    assert first["ETag"] != second["ETag"]
    assert first["ETag"].startswith(f'"p{product.id}-v')
    assert first["Last-Modified"] == second["Last-Modified"]
    assert _get(url, {"If-None-Match": second["ETag"]})[0] == 200
    assert _get(url, {"If-None-Match": "*"})[0] == 200
    status, headers, _ = _get(url, {"If-Modified-Since": second["Last-Modified"]})
    assert status == 304
    assert headers["ETag"] not in (first["ETag"], second["ETag"])
    assert _get(url, {"If-None-Match": second["ETag"], "If-Modified-Since": second["Last-Modified"]})[0] == 200
    multi_site.after_next_change(product)
    assert _get(url, {"If-Modified-Since": second["Last-Modified"]})[0] == 200
    changed = [r["changed_since_validators"] for r in multi_site.records()]
    assert changed == [None, None, False, None, False, False, True]  # the version is known even under rotation


def test_false304_answers_304_to_every_conditional_request(multi_site: MultiSite) -> None:
    product = multi_site.product("false304")
    url = multi_site.url_of(product)
    status, headers, body = _get(url)
    assert status == 200
    etag, modified = headers["ETag"], headers["Last-Modified"]
    assert etag == f'"p{product.id}-v{multi_site.catalog.version_at(product, multi_site.t)}"'
    multi_site.after_next_change(product)
    status, lie, _ = _get(url, {"If-None-Match": etag})
    assert status == 304
    assert lie["ETag"] == etag  # "still the version you have"
    assert "Last-Modified" not in lie
    status, lie, _ = _get(url, {"If-Modified-Since": modified})
    assert (status, lie.get("ETag"), lie["Last-Modified"]) == (304, None, modified)
    assert _get(url, {"If-None-Match": '"anything"'})[0] == 304
    status, fresh, new_body = _get(url)
    assert status == 200
    assert fresh["ETag"] != etag
    assert new_body != body
    records = multi_site.records()
    false_304s = [r for r in records if r["status"] == 304 and r["changed_since_validators"] is True]
    assert len(false_304s) == 2
    assert [r["changed_since_validators"] for r in records] == [None, True, True, None, None]


def test_none_sends_no_validators_and_never_304(multi_site: MultiSite) -> None:
    product = multi_site.product("none")
    url = multi_site.url_of(product)
    status, headers, _ = _get(url)
    assert status == 200
    assert "ETag" not in headers
    assert "Last-Modified" not in headers
    date = formatdate(multi_site.t, usegmt=True)
    assert _get(url, {"If-Modified-Since": date, "If-None-Match": f'"p{product.id}-v0"'})[0] == 200
    assert [r["conditional"] for r in multi_site.records()] == [False, True]


def test_host_specs_and_their_errors(catalog: Catalog) -> None:
    assert parse_host_spec("rotate") == ("rotate", "honest")
    assert parse_host_spec("rotate:volatile") == ("rotate", "volatile")
    assert parse_host_spec(" none ", "frozen") == ("none", "frozen")
    with pytest.raises(ValueError, match="host mode must be one of"):
        parse_host_spec("lazy")
    with pytest.raises(ValueError, match="last_modified must be one of"):
        parse_host_spec("honour:sometimes")
    with pytest.raises(ValueError, match="hosts must be between 1 and 254"):
        serve_in_thread(catalog, hosts=())


def _read_response(sock: socket.socket, buffer: bytearray, head: bool = False) -> bytes:
    """One whole response from *sock*, by its Content-Length; *buffer* keeps bytes of the next one."""
    deadline = time.monotonic() + 10
    while b"\r\n\r\n" not in buffer:
        assert time.monotonic() < deadline, "no response"
        chunk = sock.recv(65536)
        assert chunk, "connection closed mid-response"
        buffer += chunk
    end = buffer.index(b"\r\n\r\n") + 4
    match = re.search(rb"\r\nContent-Length: (\d+)\r\n", bytes(buffer[:end]))
    assert match is not None
    length = 0 if head else int(match.group(1))
    while len(buffer) < end + length:
        assert time.monotonic() < deadline, "no body"
        chunk = sock.recv(65536)
        assert chunk, "connection closed mid-body"
        buffer += chunk
    response = bytes(buffer[: end + length])
    del buffer[: end + length]
    return response


def test_byte_log_counts_exactly_what_the_socket_carried(multi_site: MultiSite) -> None:
    product = multi_site.product("honour")
    path = product.path
    etag = _get(multi_site.url_of(product))[1]["ETag"]
    multi_site.records()
    host, port = "127.0.0.1", urllib.parse.urlsplit(multi_site.url).port
    plain = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: raw\r\n\r\n".encode()
    conditional = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nIf-None-Match: {etag}\r\n\r\n".encode()
    head = f"HEAD {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    with_body = f"GET /robots.txt HTTP/1.1\r\nHost: {host}\r\nContent-Length: 5\r\n\r\nhello".encode()
    missing = f"GET /product/0 HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    sent: list[bytes] = []
    received: list[bytes] = []
    with socket.create_connection((host, port), timeout=10) as sock:
        buffer = bytearray()
        for request, is_head in ((plain, False), (conditional, False), (head, True)):  # keep-alive, one by one
            sock.sendall(request)
            sent.append(request)
            received.append(_read_response(sock, buffer, is_head))
        sock.sendall(with_body + missing + plain)  # pipelined: the server reads ahead of each request
        sent += [with_body, missing, plain]
        received += [_read_response(sock, buffer) for _ in range(3)]
        assert not buffer
    records = multi_site.records()
    assert [r["status"] for r in records] == [200, 304, 200, 200, 404, 200]
    assert [r["received"] for r in records] == [len(b) for b in sent]
    assert [r["sent"] for r in records] == [len(b) for b in received]
    assert [r["method"] for r in records] == ["GET", "GET", "HEAD", "GET", "GET", "GET"]
    assert [r["path"] for r in records] == [path, path, path, "/robots.txt", "/product/0", path]
    assert received[1].startswith(b"HTTP/1.1 304 ")


def test_an_unchanged_visit_to_an_honouring_host_costs_under_a_tenth_of_a_full_fetch(multi_site: MultiSite) -> None:
    """With the headers Scrapy sends by default, as the server counts bytes (issue 9, Done when)."""
    import http.client

    from scrapy.settings import default_settings

    headers = {**default_settings.DEFAULT_REQUEST_HEADERS, "User-Agent": default_settings.USER_AGENT,
               "Accept-Encoding": "gzip, deflate, br, zstd"}  # fmt: skip
    url = urllib.parse.urlsplit(multi_site.site.url_for("honour"))
    conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=10)
    try:
        for pid in multi_site.site.products_on("honour", multi_site.catalog, multi_site.t)[:10]:
            path = f"/product/{pid}"
            conn.request("GET", path, headers=headers)
            full = conn.getresponse()
            full.read()
            validators = {"If-None-Match": full.headers["ETag"], "If-Modified-Since": full.headers["Last-Modified"]}
            conn.request("GET", path, headers={**headers, **validators})
            unchanged = conn.getresponse()
            unchanged.read()
            assert (full.status, unchanged.status) == (200, 304)
    finally:
        conn.close()
    records = multi_site.records()
    assert len(records) == 20
    for full_record, unchanged_record in itertools.pairwise(records):
        if full_record["status"] != 200:
            continue
        cost_304 = unchanged_record["sent"] + unchanged_record["received"]
        cost_full = full_record["sent"] + full_record["received"]
        assert cost_304 <= 0.1 * cost_full, (cost_304, cost_full)


def test_byte_log_counts_a_malformed_request(multi_site: MultiSite) -> None:
    host, port = "127.0.0.2", urllib.parse.urlsplit(multi_site.site.url_for("ignore")).port
    request = b"NONSENSE\r\n"  # the server stops reading at a bad request line
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        response = b""
        deadline = time.monotonic() + 10
        while chunk := sock.recv(65536):
            response += chunk
            assert time.monotonic() < deadline
    (record,) = multi_site.records()
    assert (record["host"], record["mode"], record["status"]) == ("127.0.0.2", "ignore", 400)
    assert (record["received"], record["sent"]) == (len(request), len(response))


def test_server_module_serves_several_hosts_with_a_byte_log(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(PROJECT), DEMO_CLOCK_FILE=str(tmp_path / "clock"))
    clock.set_clock(tmp_path / "clock", EPOCH0)
    log = tmp_path / "bytes.jsonl"
    argv = [sys.executable, "-m", "demo_site", "--products", "20", "--categories", "2", "--hosts",
            "honour,false304,rotate:volatile", "--byte-log", str(log)]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        words = proc.stdout.readline().split()
        assert words[0] == "DEMO_SITE"
        hosts = dict(w.split("=", 1) for w in words[2:])
        assert list(hosts) == ["honour", "false304", "rotate:volatile"]
        assert hosts["honour"] == words[1]
        assert urllib.parse.urlsplit(hosts["rotate:volatile"]).hostname == "127.0.0.3"
        assert _get(hosts["false304"] + "/product/1", {"If-Modified-Since": formatdate(0, usegmt=True)})[0] == 304
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        (record,) = read_byte_log(log)[0]
        assert record["mode"] == "false304"
        assert record["changed_since_validators"] is True  # created at day 0, long after the epoch
    finally:
        _stop(proc)
    bad = subprocess.run([*argv[:-4], "--hosts", "honour,lazy"], cwd=PROJECT, env=env, capture_output=True,
                         text=True, timeout=30, check=False)  # fmt: skip
    assert bad.returncode == 2
    assert "host mode must be one of" in bad.stderr


def test_spider_follows_products_on_other_hosts(catalog: Catalog) -> None:
    from demo_shop.spiders.shop import ShopSpider
    from scrapy.http import HtmlResponse

    hosts = HostMap(5)
    hosts.urls = [f"http://127.0.0.{i + 1}:80{i}" for i in range(5)]
    t = EPOCH0 + 3600
    listing = HtmlResponse(hosts.urls[0] + "/category/1", body=render(catalog, "/category/1", t, hosts).body,
                           encoding="utf-8")  # fmt: skip
    spider = ShopSpider(site=hosts.urls[0])
    assert not getattr(spider, "allowed_domains", None)  # OffsiteMiddleware lets every host through
    urls = [r.url for r in spider.parse(listing)]
    assert urls == [f"{hosts.urls[p.id % 5]}/product/{p.id}" for p in catalog.listing_at(1, t)]


# -- a throttling host ---------------------------------------------------------------------------


@pytest.fixture
def throttled(catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ThrottledSite]:
    """Hosts honour and false304 on a byte log; each test starts the throttle it needs."""
    clock_file = tmp_path / "clock"
    monkeypatch.setenv(clock.CLOCK_ENV, str(clock_file))
    started = ThrottledSite(catalog, clock_file, tmp_path / "bytes.jsonl")
    try:
        yield started
    finally:
        if started.site is not None:
            started.site.close()


class ThrottledSite:
    def __init__(self, catalog: Catalog, clock_file: Path, log: Path) -> None:
        self.catalog, self.clock_file, self.log = catalog, clock_file, log
        self.t = EPOCH0 + 3600
        clock.set_clock(clock_file, self.t)
        self.site: SiteServer | None = None
        self._offset = 0

    def start(self, throttle: Mapping[int, Throttle]) -> str:
        """Serve the site with *throttle*; the throttling host's base URL."""
        self.site = serve_in_thread(self.catalog, hosts=("honour", "false304"), byte_log=self.log,
                                    throttle=throttle)[0]  # fmt: skip
        return self.site.url_for_throttled()

    def page(self, index: int = 1) -> str:
        """Path of a product that lives on host *index*."""
        assert self.site is not None
        return f"/product/{self.site.products_of(index, self.catalog, self.t)[0]}"

    def set_day(self, day: int, hour: float = 1.0) -> None:
        self.t = EPOCH0 + day * DAY + hour * 3600
        clock.set_clock(self.clock_file, self.t)

    def records(self) -> list[dict[str, Any]]:
        records, self._offset = read_byte_log(self.log, self._offset)
        return records


def _wait_out(records: list[dict[str, Any]]) -> None:
    """Sleep past the end of every block the records name."""
    until = max(r["blocked_until"] for r in records if r["blocked_until"] is not None)
    time.sleep(max(0.0, until - time.time()) + 0.05)


def test_a_throttling_host_serves_its_quota_then_answers_429_with_retry_after_in_seconds(
    throttled: ThrottledSite,
) -> None:
    url = throttled.start({1: Throttle(quota=3, retry_after=3.0)})  # a block long enough for a loaded machine
    page = throttled.page()
    assert [_get(url + page)[0] for _ in range(3)] == [200, 200, 200]
    status, headers, body = _get(url + page)
    assert status == 429
    assert headers["Retry-After"] == "3"  # whole seconds, rounded up
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert "Too many requests" in body
    assert headers["Date"] == formatdate(throttled.t, usegmt=True)
    # inside the block: every page gets 429, conditional or not; robots.txt and the other host are served
    assert _get(url + throttled.page(), {"If-None-Match": '"p1-v0"'})[0] == 429
    assert _get(url + "/product/0")[0] == 429  # a page the host does not have is throttled too
    assert _get(url + "/robots.txt")[0] == 200
    assert _get(throttled.site.url + throttled.page(0))[0] == 200  # type: ignore[union-attr]
    records = throttled.records()
    assert [(r["host"], r["status"]) for r in records] == [("127.0.0.2", 200)] * 3 + [("127.0.0.2", 429)] * 3 + [
        ("127.0.0.2", 200), ("127.0.0.1", 200)]  # fmt: skip
    assert [r["inside_block"] for r in records] == [False] * 4 + [True, True] + [False, False]
    # the first 429 announces the block; every 429 names the same end, a second after it arrived
    blocked = [r for r in records if r["status"] == 429]
    assert len({r["blocked_until"] for r in blocked}) == 1
    assert 3.0 <= blocked[0]["blocked_until"] - blocked[0]["time"] < 3.5  # from when it was counted
    assert all(r["blocked_until"] is None for r in records if r["status"] == 200)
    announced = records[4]["announced_at"]
    assert records[3]["time"] < announced <= records[4]["time"]  # the first 429 left before the next arrived
    assert [r["announced_at"] for r in records] == [None] * 4 + [announced] * 2 + [None] * 2
    assert [r["time"] for r in records] == sorted(r["time"] for r in records)
    assert all(abs(r["time"] - time.time()) < 30 for r in records)  # the wall clock, not the simulated one
    assert records[3]["mode"] == "false304"

    _wait_out(records)  # the block is over: another quota, then the next block
    assert [_get(url + page)[0] for _ in range(4)] == [200, 200, 200, 429]
    after = throttled.records()
    assert [r["inside_block"] for r in after] == [False] * 4
    assert after[3]["blocked_until"] > blocked[0]["blocked_until"] + 2.9


def test_a_429_is_counted_to_the_byte_like_any_response(throttled: ThrottledSite) -> None:
    url = urllib.parse.urlsplit(throttled.start({1: Throttle(quota=1, retry_after=30.0)}))
    host, port = url.hostname or "", url.port or 0
    request = f"GET {throttled.page()} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()
    head = f"HEAD {throttled.page()} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    with socket.create_connection((host, port), timeout=10) as sock:
        buffer = bytearray()
        responses = []
        for data, is_head in ((request, False), (request, False), (head, True)):  # keep-alive through a 429
            sock.sendall(data)
            responses.append(_read_response(sock, buffer, is_head))
    assert [r[:12] for r in responses] == [b"HTTP/1.1 200", b"HTTP/1.1 429", b"HTTP/1.1 429"]
    assert b"\r\nRetry-After: 30\r\n" in responses[1]
    records = throttled.records()
    assert [r["status"] for r in records] == [200, 429, 429]
    assert [r["received"] for r in records] == [len(request), len(request), len(head)]
    assert [r["sent"] for r in records] == [len(r) for r in responses]
    assert [r["inside_block"] for r in records] == [False, False, True]


def test_retry_after_as_an_http_date_on_the_simulated_clock(throttled: ThrottledSite) -> None:
    url = throttled.start({1: Throttle(quota=1, retry_after=1.0, as_date=True)})
    throttled.set_day(2, hour=5.25)
    assert _get(url + throttled.page())[0] == 200
    status, headers, _ = _get(url + throttled.page())
    assert status == 429
    date = parsedate_to_datetime(headers["Date"]).timestamp()
    retry_at = parsedate_to_datetime(headers["Retry-After"]).timestamp()
    assert date == throttled.t
    assert retry_at - date == 1.0  # the real second the block has left, rounded up, on the site's clock
    assert not headers["Retry-After"].isdigit()


def test_a_new_simulated_day_restarts_the_count(throttled: ThrottledSite) -> None:
    url = throttled.start({1: Throttle(quota=2, retry_after=3.0)})  # a block that outlasts a loaded machine's pause
    page = throttled.page()
    assert [_get(url + page)[0] for _ in range(2)] == [200, 200]
    throttled.set_day(0, hour=20)  # later the same day: the count goes on
    throttled.set_day(1, hour=0.5)  # the next day: a new count
    assert [_get(url + page)[0] for _ in range(3)] == [200, 200, 429]
    throttled.set_day(2)
    assert _get(url + page)[0] == 429  # a new day does not lift a block: it runs in real seconds
    _wait_out(throttled.records())
    assert [_get(url + page)[0] for _ in range(3)] == [200, 200, 429]


def test_the_same_day_goes_on_counting(throttled: ThrottledSite) -> None:
    url = throttled.start({1: Throttle(quota=2, retry_after=1.0)})
    page = throttled.page()
    assert _get(url + page)[0] == 200
    throttled.set_day(0, hour=23.9)
    assert [_get(url + page)[0] for _ in range(2)] == [200, 429]


def test_robots_txt_is_never_throttled_nor_counted(throttled: ThrottledSite) -> None:
    url = throttled.start({0: Throttle(quota=1, retry_after=30.0)})
    assert throttled.site is not None
    assert url == throttled.site.url  # the main host can throttle too
    assert [_get(url + "/robots.txt")[0] for _ in range(5)] == [200] * 5
    assert [_get(url + "/category/0")[0] for _ in range(2)] == [200, 429]
    assert [_get(url + "/robots.txt?x=1")[0] for _ in range(2)] == [200, 200]
    assert [r["inside_block"] for r in throttled.records()] == [False] * 9


def test_concurrent_requests_get_exactly_the_quota(throttled: ThrottledSite) -> None:
    from concurrent.futures import ThreadPoolExecutor

    url = throttled.start({1: Throttle(quota=7, retry_after=30.0)})
    with ThreadPoolExecutor(max_workers=16) as pool:
        statuses = list(pool.map(lambda _: _get(url + throttled.page())[0], range(40)))
    assert sorted(statuses) == [200] * 7 + [429] * 33
    records = throttled.records()
    first = min(r["time"] for r in records if r["status"] == 429)
    assert all(r["status"] == 429 for r in records if r["inside_block"])
    assert all(r["time"] >= first for r in records if r["inside_block"])


def test_the_gate_blames_only_requests_sent_after_the_block_was_announced() -> None:
    ticks = [100.0]
    gate = ThrottleGate(Throttle(quota=1, retry_after=5.0), monotonic=lambda: ticks[0])
    assert gate.admit(0, 100.0).wait is None
    first = gate.admit(0, 100.0)
    assert (first.wait, first.inside_block) == (5.0, False)
    ticks[0] = 101.0
    racing = gate.admit(0, 100.5)  # arrived before the first 429 left: the client could not know
    assert (racing.wait, racing.inside_block) == (4.0, False)
    gate.announced(first.block, 101.0)
    late = gate.admit(0, 101.0)
    assert (late.wait, late.inside_block) == (4.0, True)
    assert racing.announced_at is None
    assert late.announced_at is not None
    ticks[0] = 105.0
    after = gate.admit(0, 105.0)
    assert (after.wait, after.inside_block) == (None, False)
    gate.announced(first.block, 105.0)  # a stale announcement does not start anything
    ticks[0] = 106.0
    blocked = gate.admit(0, 106.0)
    assert (blocked.wait, blocked.inside_block) == (5.0, False)
    assert blocked.block == first.block + 1


def test_throttle_specs_and_their_errors(catalog: Catalog) -> None:
    assert parse_throttle_spec("5:20:3") == (5, Throttle(20, 3.0))
    assert parse_throttle_spec(" 0:1:0.5:date ") == (0, Throttle(1, 0.5, as_date=True))
    assert parse_throttles(["1:2:3", "0:4:5:date"], 2) == {1: Throttle(2, 3.0), 0: Throttle(4, 5.0, True)}
    for spec, message in (("5:20", "INDEX:QUOTA:SECONDS"), ("5:20:3:http", "INDEX:QUOTA:SECONDS"),
                          ("x:20:3", "must be integers"), ("1:2.5:3", "must be integers"),
                          ("-1:2:3", "index must be >= 0"), ("1:0:3", "quota must be >= 1"),
                          ("1:2:0", "positive number"), ("1:2:inf", "positive number"),
                          ("1:2:nan", "positive number")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            parse_throttle_spec(spec)
    with pytest.raises(ValueError, match=r"no host 2, the site has hosts 0\.\.1"):
        parse_throttles(["2:1:1"], 2)
    with pytest.raises(ValueError, match="host 1 already throttles"):
        parse_throttles(["1:1:1", "1:2:2"], 2)
    with pytest.raises(ValueError, match="throttle names host index 3"):
        SiteServer(catalog, hosts=("honour", "none"), throttle={3: Throttle(1, 1.0)})
    site = SiteServer(catalog, hosts=("honour",))
    try:
        with pytest.raises(KeyError):
            site.url_for_throttled()
    finally:
        site.server_close()


def test_server_module_throttles_the_hosts_it_is_told_to(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(PROJECT), DEMO_CLOCK_FILE=str(tmp_path / "clock"))
    clock.set_clock(tmp_path / "clock", EPOCH0)
    log = tmp_path / "bytes.jsonl"
    argv = [sys.executable, "-m", "demo_site", "--products", "20", "--categories", "2", "--hosts",
            "honour,none", "--byte-log", str(log), "--throttle", "1:1:30", "--throttle", "0:1:30:date"]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        words = proc.stdout.readline().split()
        main, other = (w.split("=", 1)[1] for w in words[2:])
        assert [_get(other + "/product/1")[0] for _ in range(2)] == [200, 429]
        assert [_get(main + "/category/0")[0] for _ in range(2)] == [200, 429]
        assert not _get(main + "/category/1")[1]["Retry-After"].isdigit()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert [(r["host"], r["status"], r["inside_block"]) for r in read_byte_log(log)[0]] == [
            ("127.0.0.2", 200, False), ("127.0.0.2", 429, False), ("127.0.0.1", 200, False),
            ("127.0.0.1", 429, False), ("127.0.0.1", 429, True)]  # fmt: skip
    finally:
        _stop(proc)
    for spec, message in (("2:1:1", "no host 2"), ("1:1", "INDEX:QUOTA:SECONDS")):
        bad = subprocess.run([*argv[:-4], "--throttle", spec], cwd=PROJECT, env=env, capture_output=True,
                             text=True, timeout=30, check=False)  # fmt: skip
        assert bad.returncode == 2
        assert "--throttle: " in bad.stderr
        assert message in bad.stderr
