"""The demo site: seeded catalog, exact freshness scoring, HTTP server, and the demo spider's parsing."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from email.utils import formatdate
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1] / "example_project"
if str(PROJECT) not in sys.path:
    sys.path.insert(0, str(PROJECT))

from demo_site import clock
from demo_site.catalog import DAY, EPOCH0, RATE_BUCKETS, TIERS, Catalog
from demo_site.evaluate import Dataset, ScrapeMismatch, freshness, parse_price
from demo_site.server import render, serve_in_thread

WEIGHTS = {"low": 0.25, "normal": 1.0, "high": 4.0, "critical": 16.0}


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.generate(products=300, categories=10, seed=1, horizon_days=60)


# -- catalog -----------------------------------------------------------------------------------


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
        server.shutdown()
        server.server_close()


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
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


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
        server.shutdown()
        server.server_close()
    with pytest.raises(ValueError, match="last_modified must be one of"):
        serve_in_thread(catalog, last_modified="sometimes")
