"""The end-of-run prior refit (which pages it samples, and what it writes back), and what the learner says."""

from __future__ import annotations

import logging
import math
import random
from email.utils import formatdate
from typing import TYPE_CHECKING, Any

import pytest

from scrapy_costsched.learner import DAY, Learner
from scrapy_costsched.model import ChangeStats, RateEstimate, RatePrior, estimate_rate
from scrapy_costsched.model.discovery import LinkPrior, NewLinkStats, pooled_prior
from scrapy_costsched.model.learning import PRIOR_MIN_PAGES, PRIOR_SAMPLE
from scrapy_costsched.pages import PageState
from scrapy_costsched.storage import SqliteDictStorage
from tests.components import Product
from tests.helpers import NOW

if TYPE_CHECKING:
    from pathlib import Path

GROUP = "shop.example|product"


def seeded_store(path: Path, pages: int) -> SqliteDictStorage:
    """A state of *pages* product pages of one host, each with a short history of its own."""
    rng = random.Random(3)
    store = SqliteDictStorage(path)
    store.open()
    for i in range(pages):
        stats = ChangeStats()
        rate = math.exp(rng.uniform(-5.0, 1.0))
        for _ in range(4):
            stats.add(1.0, changed=rng.random() < -math.expm1(-rate))
        page = PageState(url=f"http://shop.example/p/{i}", host="shop.example", page_type="product",
                         value="normal", first_seen=0.0, last_visit=86400.0, stats=stats,
                         estimate=RateEstimate(1.0, 0.5, 2.0))
        store.put_page(f"{i:040x}", page.to_json(), page.summary())
    store.commit()
    return store


def refit(store: SqliteDictStorage, keys: list[str], seed: int) -> dict[str, list[float]]:
    """Refit the group's prior with the pages' keys given in *keys*' order; the priors stored."""
    learner = Learner(store, None, None, 30 * 86400.0, "config")  # type: ignore[arg-type]
    learner.observed_groups.add(GROUP)
    assert learner.refit_priors(seed=seed, groups=[(key, GROUP) for key in keys]) == 1
    store.commit()
    priors: dict[str, list[float]] = store.get_meta("priors")
    return priors


def test_the_refit_samples_the_same_pages_whatever_order_the_keys_come_in(tmp_path: Path) -> None:
    """A group larger than the sample: the sample depends on the seed, not on the order of the keys,
    and only the sampled pages are re-estimated and written back."""
    pages = PRIOR_SAMPLE * 3
    keys = [f"{i:040x}" for i in range(pages)]
    forward = seeded_store(tmp_path / "a.sqlite", pages)
    backward = seeded_store(tmp_path / "b.sqlite", pages)
    prior = refit(forward, keys, seed=20_000)
    assert refit(backward, keys[::-1], seed=20_000) == prior
    rewritten = [key for key, data in forward.get_pages(keys) if data["estimate"] != [1.0, 0.5, 2.0]]
    assert len(rewritten) == PRIOR_SAMPLE
    assert sorted(rewritten) == sorted(key for key, data in backward.get_pages(keys)
                                       if data["estimate"] != [1.0, 0.5, 2.0])
    # Another period draws another sample.
    other = seeded_store(tmp_path / "c.sqlite", pages)
    refit(other, keys, seed=20_001)
    assert sorted(key for key, data in other.get_pages(keys) if data["estimate"] != [1.0, 0.5, 2.0]) != sorted(rewritten)
    for store in (forward, backward, other):
        store.close()


def _put_group(store: SqliteDictStorage, page_type: str, pages: int, rate: float, rng: random.Random) -> list[str]:
    """*pages* pages of *page_type* on shop.example, each with six daily visits of a page changing at *rate*."""
    keys = []
    for i in range(pages):
        stats = ChangeStats()
        for _ in range(6):
            stats.add(1.0, changed=rng.random() < -math.expm1(-rate))
        page = PageState(url=f"http://shop.example/{page_type}/{i}", host="shop.example", page_type=page_type,
                         value="normal", first_seen=0.0, last_visit=86400.0, stats=stats)
        keys.append(f"{page_type}{i:034x}")
        store.put_page(keys[-1], page.to_json(), page.summary())
    store.commit()
    return keys


def _observed_groups(store: SqliteDictStorage, seed: int,
                     *kinds: tuple[str, int, float]) -> tuple[Learner, list[tuple[str, str]]]:
    """Each of *kinds* (page type, pages, rate) put on shop.example by :func:`_put_group`, and a learner that saw
    them all this run; with every page's key and group."""
    rng = random.Random(seed)
    groups = [(key, f"shop.example|{page_type}") for page_type, pages, rate in kinds
              for key in _put_group(store, page_type, pages, rate, rng)]
    learner = Learner(store, None, None, 30 * 86400.0, "config")  # type: ignore[arg-type]
    learner.observed_groups.update(group for _, group in groups)
    return learner, groups


def test_a_group_without_a_prior_of_its_own_takes_its_host_s(tmp_path: Path) -> None:
    """Found in a trial: the sitemaps of a shop whose products change about daily were priced with the default
    prior (one change in ten days), and the new pages they might reveal at ten days of freshness each."""
    store = SqliteDictStorage(tmp_path / "state.sqlite")
    store.open()
    learner, groups = _observed_groups(store, 5, ("product", 40, 1.0), ("sitemap", 3, 0.01))
    assert learner.refit_priors(seed=1, groups=groups) == 1  # the sitemaps are too few for a prior of their own
    store.commit()
    restored = Learner(store, None, None, 30 * 86400.0, "config")  # type: ignore[arg-type]
    host = restored.host_priors["shop.example"]
    assert restored.prior_of("shop.example|sitemap") == host != RatePrior()
    assert 0.5 < host.median < 2.0
    assert restored.prior_of("shop.example|product") == restored.priors["shop.example|product"]
    assert restored.prior_of("other.example|product") == RatePrior()
    store.close()


def test_a_page_of_no_known_kind_is_planned_at_its_host_s_prior_not_at_its_list_pages_one(tmp_path: Path) -> None:
    """Found in a trial: once 20 of a jobs board's list pages (untyped: they yield no items) had histories, each
    changed at every visit, the untyped group had a prior of its own at dozens of changes a day; the new job pages
    a list reveals (untyped until parsed) were priced at it, worth almost nothing, and discovery stopped."""
    store = SqliteDictStorage(tmp_path / "state.sqlite")
    store.open()
    learner, groups = _observed_groups(store, 7, ("product", 60, 0.2), ("default", 25, 50.0))
    assert learner.refit_priors(seed=1, groups=groups) == 2
    lists = learner.prior_of("shop.example|default")
    assert lists.median > 5.0  # the lists' own prior: they changed at every daily visit
    host = learner.host_priors["shop.example"]
    assert host.median < 1.0
    assert learner.prior_rate("shop.example|default") == host.median  # a new URL: its host's prior
    assert learner.prior_rate("shop.example|product") == learner.prior_of("shop.example|product").median
    assert learner.prior_rate("other.example|default") == RatePrior().median
    # A list page seen twice is estimated under its group's prior, as before.
    list_page = PageState.from_json(dict(store.get_pages([groups[-1][0]]))[groups[-1][0]])
    assert list_page.estimate is not None
    assert list_page.estimate.rate > 5.0
    store.close()


def test_a_group_without_a_prior_of_its_own_is_estimated_again_when_its_host_s_prior_moves(tmp_path: Path) -> None:
    """Found in a trial: eight company pages kept the estimates their host's prior gave them while the host's job
    pages seemed to change at every visit (3.2 changes a day, the 90% interval above 2.2), though none had changed
    in four days, and were planned as such long after the host's prior had come down."""
    store = SqliteDictStorage(tmp_path / "state.sqlite")
    store.open()
    groups = [(key, "shop.example|product") for key in _put_group(store, "product", 40, 1.0, random.Random(5))]
    inflated = RateEstimate(3.2, 2.3, 4.4)
    for i in range(3):
        stats = ChangeStats()
        stats.add(4.0, changed=False)
        page = PageState(url=f"http://shop.example/company/{i}", host="shop.example", page_type="company",
                         value="normal", first_seen=0.0, last_visit=4 * 86400.0, stats=stats, estimate=inflated)
        groups.append((f"company{i:033x}", "shop.example|company"))
        store.put_page(groups[-1][0], page.to_json(), page.summary())
    store.commit()
    learner = Learner(store, None, None, 30 * 86400.0, "config")  # type: ignore[arg-type]
    learner.host_priors["shop.example"] = RatePrior(math.log(4.0), 0.2)  # as the job pages had made it
    learner.observed_groups.add("shop.example|product")  # the companies were not visited in this run
    learner.refit_priors(seed=1, groups=groups)
    store.commit()
    host = learner.host_priors["shop.example"]
    assert host.median < 2.0
    companies = [PageState.from_json(data) for _, data in store.get_pages([key for key, _ in groups[40:]])]
    assert len(companies) == 3
    for page in companies:
        assert page.estimate == estimate_rate(page.stats, host) != inflated
        assert page.estimate is not None
        assert page.estimate.rate < 0.5
    store.close()


def test_a_host_s_prior_weighs_each_group_by_its_pages_not_by_its_capped_sample(tmp_path: Path) -> None:
    """Three times as many fast pages as slow ones: each group's own sample is capped at PRIOR_SAMPLE, and pooled
    as they are the two would weigh alike (a median between them, near 0.14 a day)."""
    store = SqliteDictStorage(tmp_path / "state.sqlite")
    store.open()
    rng = random.Random(6)
    groups = [(key, "shop.example|product") for key in _put_group(store, "product", 3 * PRIOR_SAMPLE, 2.0, rng)]
    groups += [(key, "shop.example|category") for key in _put_group(store, "category", PRIOR_SAMPLE, 0.01, rng)]
    learner = Learner(store, None, None, 30 * 86400.0, "config")  # type: ignore[arg-type]
    learner.observed_groups.add("shop.example|product")  # the categories are pooled all the same
    learner.refit_priors(seed=2, groups=groups)
    assert "shop.example|category" not in learner.priors
    assert learner.prior_of("shop.example|new-kind").median > 0.5
    store.close()


def test_a_host_whose_etag_never_moves_is_warned_about_once(runs: Any, caplog: pytest.LogCaptureFixture) -> None:
    urls = [f"http://shop.example/p/{n}" for n in range(1, 6)]
    first = runs()
    for url in urls:
        first.visit(url, [Product(url, 1.0)], headers={"ETag": '"v1"'})
    run = runs()
    for url in urls:  # every page changed, under the same ETag
        run.visit(url, [Product(url, 2.0)], headers={"ETag": '"v1"'})
    assert run.stats["costsched/etag/contradicts"] == len(urls)
    warned = [r.getMessage() for r in caplog.records if "sent the same ETag" in r.getMessage()]
    # The fields that changed are named: a field the spider fills at each visit contradicts the ETag too.
    assert warned == [(f"costsched: shop.example sent the same ETag for a changed record ({urls[0]}, whose field "
                       "'price' changed): its ETags are not trusted for a while (costsched/etag/contradicts counts "
                       "each such answer); if that field is filled by your code at each visit (a time, a token), the "
                       "server is right: leave it out with COSTSCHED_IGNORE_FIELDS")]


def test_items_that_gained_a_field_count_a_change_but_do_not_audit_the_host(
        runs: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A field added to the spider's items changes every page's record under the same ETag: the spider changed,
    not the page, so the host's ETags are not taken for false (found in a trial)."""
    caplog.set_level(logging.INFO, logger="scrapy_costsched")
    urls = [f"http://shop.example/p/{n}" for n in range(1, 6)]
    first = runs()
    for url in urls:
        first.visit(url, [{"sku": url, "price": 1.0}], headers={"ETag": '"v1"'})
    run = runs()
    for url in urls[:4]:
        run.visit(url, [{"sku": url, "price": 1.0, "currency": "EUR"}], headers={"ETag": '"v1"'})
    host = run.tracker.hosts.of("shop.example")
    assert run.stats["costsched/items/reshaped"] == 4
    assert not host.etag.probation
    assert "costsched/etag/contradicts" not in run.stats
    assert [run.page(url).changes for url in urls[:4]] == [1, 1, 1, 1]
    said = [r.getMessage() for r in caplog.records if "have other fields" in r.getMessage()]
    assert said == [(f"costsched: the items of 'default' pages have other fields than at their last visits (as at "
                     f"{urls[0]}: did the spider change?); each such visit counts as a change, but says nothing of its "
                     "host's ETags or Last-Modified dates (costsched/items/reshaped counts them; COSTSCHED_HASH_FIELDS "
                     "keeps such changes out of the pages' histories)")]
    # Items of the fields the record had: a changed record under the same ETag still contradicts it.
    run.visit(urls[4], [{"sku": urls[4], "price": 2.0}], headers={"ETag": '"v1"'})
    assert run.stats["costsched/etag/contradicts"] == 1
    assert host.etag.probation


def test_a_field_left_out_of_the_hash_is_not_reported_by_the_304s_that_follow(
        runs: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Found in a trial: a spider's timestamp was named, the user left it out as told, and once the host's ETags
    were trusted again each run still named it: a 304 counted the fields of the page's last full answer, hashed
    before the field was left out."""
    urls = [f"http://shop.example/p/{n}" for n in range(1, 7)]
    for day in range(2):
        run = runs()
        for url in urls:
            run.visit(url, [Product(url, 1.0, ts=f"day {day}")], headers={"ETag": '"v1"'})
        run.close()
    assert any("item field 'ts' changes on nearly every visit" in r.getMessage() for r in caplog.records)
    caplog.clear()
    run = runs(COSTSCHED_IGNORE_FIELDS=["ts"])
    run.not_modified(urls[0], headers={"ETag": '"v1"'})  # the other pages keep their verdict on the field
    run.close()
    assert run.stats["costsched/not_modified"] == 1
    assert not [r.getMessage() for r in caplog.records if "changes on nearly every visit" in r.getMessage()]
    assert "costsched/items/volatile_fields" not in run.stats


def test_a_host_that_dates_each_answer_at_its_own_time_is_said_to_be_volatile_once(
        runs: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Found in a trial: a site sent its own time as every page's Last-Modified, so its dates were found volatile,
    and nothing but a stat said why no If-Modified-Since ever went out. The same for ETags made at each answer."""
    caplog.set_level(logging.INFO, logger="scrapy_costsched")
    urls = [f"http://shop.example/p/{n}" for n in range(1, 6)]
    for _ in range(4):
        run = runs()
        now = formatdate(NOW[0], usegmt=True)
        for url in urls:  # unchanged records, each answer dated at its own time and tagged anew
            run.visit(url, [Product(url, 1.0)], headers={"Last-Modified": now, "Date": now, "ETag": f'"{NOW[0]}"'})
    assert run.tracker.hosts.last_modified_trust("shop.example").verdict == "volatile"
    assert run.tracker.hosts.of("shop.example").etag.verdict == "volatile"
    said = [r.getMessage() for r in caplog.records if "moves without the records" in r.getMessage()]
    assert len(said) == 2
    for header, stat in (("Last-Modified", "last_modified"), ("ETag", "etag")):
        line = next(line for line in said if f"'s {header} " in line)
        assert line.startswith(f"costsched: shop.example's {header} moves without the records (as at http://")
        assert line.endswith(f"(costsched/hosts/shop.example/{stat})")


def test_changes_a_site_dates_just_before_each_crawl_do_not_make_its_pages_look_hourly(
        runs: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Found on a job board's API (trial 11): a nightly update dates each change an hour before the morning crawl.
    Read to the second, such a date says "changed, then unchanged for an hour": on a page with little history, one
    of them made a page that changes every few days look like five to ten changes a day, and the plan, which writes
    off pages that change too often to be kept fresh, did not visit two pages in five again. Dates that bunch at
    one time of the day date their changes to the day."""
    caplog.set_level(logging.INFO, logger="scrapy_costsched")
    rng = random.Random(3)
    version: dict[str, int] = {}
    modified: dict[str, float] = {}

    def crawl(urls: list[str], changes: list[float]) -> Any:
        run = runs()
        for url, chance in zip(urls, changes, strict=True):
            if url in version and rng.random() < chance:  # the night's batch, an hour before the crawl
                version[url] += 1
                modified[url] = NOW[0] - 3600.0
            version.setdefault(url, 0)
            modified.setdefault(url, NOW[0] - 5 * DAY)
            run.visit(url, [Product(url, float(version[url]))],
                      headers={"Last-Modified": formatdate(modified[url], usegmt=True),
                               "Date": formatdate(NOW[0], usegmt=True)})
        return run

    old = [f"http://shop.example/p/{n}" for n in range(1, 21)]
    for _ in range(6):  # the host's dates earn trust; its pages change from once in 50 days to twice in 3
        crawl(old, [(0.02, 0.1, 0.3, 0.7)[n % 4] for n in range(len(old))])
    new = [f"http://shop.example/p/{n}" for n in range(21, 31)]
    crawl(new, [0.0] * len(new))  # listed today: a first visit
    runs()
    run = crawl(new, [1.0] * len(new))  # two days later, each has changed in the night
    rates = [run.page(url).estimate.rate for url in new]
    assert max(rates) < 1.5, rates  # changed once in two days
    assert run.stats["costsched/last_modified/dated_changes"] == len(new)
    assert run.tracker.hosts.last_modified_trust("shop.example").trusted
    assert run.tracker.hosts.verdicts("shop.example")["last_modified"] == "batched"  # its dates tell the day
    said = [r.getMessage() for r in caplog.records if "bunch at one time of the day" in r.getMessage()]
    assert len(said) == 1
    assert said[0].startswith("costsched: shop.example's Last-Modified dates bunch at one time of the day")
    assert said[0].endswith("(costsched/hosts/shop.example/last_modified)")


def test_a_redirected_answer_s_dates_and_etags_do_not_audit_its_host(runs: Any) -> None:
    """A "deal of the day" redirects to another product each day, and two products may share a date: its record
    changes while the Last-Modified it gets stays, which says nothing of the host's dates."""
    deal = "http://shop.example/deal"
    headers = {"Last-Modified": "Sun, 01 Nov 2026 12:00:00 GMT", "Date": "Mon, 30 Nov 2026 12:00:00 GMT",
               "ETag": '"same"'}
    for product in range(1, 4):  # the baseline, then a change on each of two days
        run = runs()
        run.visit(deal, [Product(deal, float(product))], headers=headers, landed=f"http://shop.example/p/{product}")
    assert run.page(deal).changes == 2
    audits = [name for name in run.stats if name.startswith(("costsched/last_modified/", "costsched/etag/"))]
    assert audits == []
    host = run.tracker.hosts.of("shop.example")
    assert not host.etag.probation
    assert not run.tracker.hosts.last_modified_trust("shop.example").probation


def test_the_refit_pools_the_new_links_a_group_revealed_into_its_hub_prior(tmp_path: Path) -> None:
    """Product pages that link out (to their brand, a print view) but never to a new page: once a refit has
    seen the group, a product page is priced as revealing almost nothing, not the first prior's half a page a
    day; a group never seen keeps that first prior."""
    store = SqliteDictStorage(tmp_path / "state.sqlite")
    store.open()
    keys = []
    for i in range(20):
        stats = ChangeStats()
        stats.add(1.0, changed=i % 4 == 0)
        page = PageState(url=f"http://shop.example/p/{i}", host="shop.example", page_type="product", value="normal",
                         first_seen=0.0, last_visit=86400.0, stats=stats, links=NewLinkStats(links=0.0, days=3.0))
        keys.append(f"{i:040x}")
        store.put_page(keys[-1], page.to_json(), page.summary())
    store.commit()
    learner = Learner(store, None, None, 30 * 86400.0, "config")  # type: ignore[arg-type]
    assert learner.link_prior_of(GROUP) == LinkPrior()
    learner.observed_groups.add(GROUP)
    learner.refit_priors(seed=1, groups=[(key, GROUP) for key in keys])
    store.commit()
    restored = Learner(store, None, None, 30 * 86400.0, "config")  # type: ignore[arg-type]
    prior = restored.link_prior_of(GROUP)
    assert prior == pooled_prior([NewLinkStats(links=0.0, days=3.0)] * 20)
    assert prior.mean == LinkPrior().shape / (LinkPrior().days + 60.0)
    assert NewLinkStats().rate(prior) < 0.01
    assert NewLinkStats().rate(restored.link_prior_of("other|page")) == 0.5
    store.close()


@pytest.mark.parametrize("left_out", ["ts", "name"])
def test_leaving_out_a_volatile_field_drops_the_history_and_the_prior_it_poisoned(
        runs: Any, caplog: pytest.LogCaptureFixture, left_out: str) -> None:
    """Found in a trial: after the user left out the timestamp the warning named, the pages' histories still said
    they changed at every visit (4.8 to 6.3 changes a day estimated for recipes that change every 1 to 30 days),
    so they ranked as changing too often to be worth a visit. Leaving out a field that was not named keeps the
    histories."""
    caplog.set_level(logging.INFO, logger="scrapy_costsched")
    urls = [f"http://shop.example/p/{n}" for n in range(PRIOR_MIN_PAGES + 4)]  # enough to fit a prior
    for day in range(4):
        run = runs()
        for url in urls:
            run.visit(url, [Product(url, 1.0, ts=f"day {day}")], headers={"ETag": '"v1"'})
    poisoned = run.page(urls[0])
    assert poisoned.stats.visits > 2  # faded by the history's half-life
    assert poisoned.changes == 3
    run.close()
    assert poisoned.group in run.tracker.learner.priors
    run = runs(COSTSCHED_IGNORE_FIELDS=[left_out])
    for url in urls[:-1]:
        run.visit(url, [Product(url, 1.0, ts="day 4")], headers={"ETag": '"v1"'})
    assert run.stats["costsched/rebaseline"] == len(urls) - 1
    said = [r.getMessage() for r in caplog.records if "lose their change history" in r.getMessage()]
    if left_out == "name":
        assert run.page(urls[0]).stats.visits > 2
        assert run.page(urls[0]).changes == 3
        assert "costsched/history_forgotten" not in run.stats
        assert said == []
        return
    assert (run.page(urls[0]).stats.visits, run.page(urls[0]).changes, run.page(urls[0]).estimate) == (0, 0, None)
    assert run.page(urls[-1]).stats.visits > 2  # not re-baselined yet
    assert run.stats["costsched/history_forgotten"] == len(urls) - 1
    assert said == [("costsched: 'Product' pages lose their change history at this re-baseline: it counted the "
                     "changes of 'ts', which the record no longer holds, and their rates are learned again "
                     "(costsched/history_forgotten counts the pages)")]
    run.close()
    # The prior fitted to those histories is gone from the state, and the histories start again.
    run = runs(COSTSCHED_IGNORE_FIELDS=[left_out])
    assert poisoned.group not in run.tracker.learner.priors
    assert run.tracker.learner.prior_of(poisoned.group) == RatePrior()  # nor taken from its host's, fitted to them
    run.visit(urls[0], [Product(urls[0], 1.0, ts="day 5")], headers={"ETag": '"v1"'})
    assert (round(run.page(urls[0]).stats.visits, 6), run.page(urls[0]).changes) == (1, 0)
