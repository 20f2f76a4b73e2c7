"""The news site of issue 8's regressions, and one shadow-mode crawl of ``tests/news_project`` against it."""

from __future__ import annotations

import http.client
import re
from email.utils import formatdate
from typing import TYPE_CHECKING

import pytest

from tests.newssite import NewsSite, run_news

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture
def site(tmp_path: Path) -> Iterator[NewsSite]:
    with NewsSite(tmp_path / "clock", sections=3, flaky_gone=(5,), broken=7) as news:
        yield news


def get(site: NewsSite, path: str, host: str = "127.0.0.1", **headers: str) -> tuple[int, dict[str, str], str]:
    conn = http.client.HTTPConnection(host, site.port, timeout=10)
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode()
    finally:
        conn.close()


def test_content_is_a_function_of_the_seed(tmp_path: Path) -> None:
    with NewsSite(tmp_path / "a", seed=3) as a, NewsSite(tmp_path / "b", seed=3) as b, \
            NewsSite(tmp_path / "c", seed=4) as c:
        assert a.articles == b.articles
        assert a.articles != c.articles
        t = a.day(2)
        for x in a.articles_at(t):  # the same but for the port in the URL
            assert (a.item_at(x.id, t) or {}) | {"url": ""} == (b.item_at(x.id, t) or {}) | {"url": ""}


def test_articles_appear_at_each_sections_rate(tmp_path: Path) -> None:
    with NewsSite(tmp_path / "clock", horizon_days=60.0, backlog_days=0.0) as news:
        for s, rate in enumerate(news.section_rates):
            count = sum(a.section == s for a in news.articles)
            assert count == pytest.approx(60 * rate, rel=0.25)
        assert news.section_rates == (2.0, 2.0, 2.0, 6.0)
        rates = sorted(a.rate for a in news.articles)
        assert rates[len(rates) // 2] < 1 / 7  # most change rarely
        assert rates[-len(rates) // 20] >= 1.0  # some change daily


def test_a_section_lists_its_newest_articles_and_when_the_list_changed(site: NewsSite) -> None:
    t = site.day(1)
    site.set_time(t)
    listing = site.listing_at(0, t)
    assert len(listing) == site.per_page
    assert [a.published for a in listing] == sorted((a.published for a in listing), reverse=True)
    assert all(a.section == 0 and a.published <= t for a in listing)
    status, _, body = get(site, "/section/0")
    assert status == 200
    assert re.findall(r'href="(/article/\d+)"', body) == [a.path for a in listing]
    assert "/private/0" in body  # section 0 links to a page robots.txt disallows
    stamp = re.search(r'<time class="updated">([^<]+)</time>', body)
    assert stamp is not None
    # The stamp moves exactly when the list does.
    nxt = next(a for a in site.articles if a.section == 0 and a.published > t)
    site.set_time(nxt.published - 1)
    assert get(site, "/section/0")[2] == body
    site.set_time(nxt.published)
    after = get(site, "/section/0")[2]
    assert re.findall(r'href="(/article/\d+)"', after)[0] == nxt.path
    assert stamp.group(1) not in after
    assert "/private/" not in get(site, "/section/1")[2]


def test_articles_change_at_their_own_times(site: NewsSite) -> None:
    article = next(a for a in site.articles_at(site.day(0)) if a.updates and a.updates[0] < site.day(20))
    site.set_time(article.updates[0] - 1)
    before = get(site, article.path)
    site.set_time(article.updates[0])
    after = get(site, article.path)
    assert before[0] == after[0] == 200
    assert before[2] != after[2]
    assert after[1]["Last-Modified"] == formatdate(article.updates[0], usegmt=True)
    assert after[1]["Date"] == formatdate(article.updates[0], usegmt=True)
    item = site.item_at(article.id, article.updates[0])
    assert item is not None
    assert item["updated"] in after[2]
    assert item["body"].split(". ")[0] in after[2]
    assert site.is_fresh(item, article.updates[0])
    assert not site.is_fresh(item, article.updates[0] - 1)
    status, _, _ = get(site, article.path, **{"If-Modified-Since": after[1]["Last-Modified"]})
    assert status == 304


def test_unpublished_moved_private_broken_and_flaky_pages(site: NewsSite) -> None:
    t = site.day(0)
    future = next(a for a in site.articles if a.published > t)
    assert get(site, future.path)[0] == 404
    assert site.item_at(future.id, t) is None
    status, headers, _ = get(site, "/moved/3")
    assert status == 301
    assert headers["Location"] == "/article/3"
    assert get(site, "/private/0")[0] == 200
    assert get(site, "/robots.txt")[2] == "User-agent: *\nDisallow: /private/\n"
    assert get(site, "/article/7")[0] == 500
    assert site.item_at(7, t) is None
    answers = set()
    for d in range(10):
        site.set_day(d)
        gone = site.gone_at(5, site.now())
        assert get(site, "/article/5")[0] == (404 if gone else 200)
        answers.add(gone)
    assert answers == {True, False}
    assert not any(site.gone_at(4, site.day(d)) for d in range(10))


def test_offsite_host_and_request_counts(site: NewsSite) -> None:
    _, _, front = get(site, "/")
    assert f'href="{site.offsite_url}/offsite"' in front
    assert site.offsite_host != "127.0.0.1"
    assert get(site, "/offsite", host=site.offsite_host)[0] == 200
    assert site.offsite_hits == {"/offsite": 1}
    assert site.hits == {"/": 1}
    assert site.total == 2
    get(site, "/section/1")
    get(site, "/section/1")
    assert site.requests("/section/") == 2
    site.reset_counts()
    assert (site.hits, site.offsite_hits, site.total) == ({}, {}, 0)


def test_shadow_crawl_over_two_days_obeys_robots(site: NewsSite, tmp_path: Path) -> None:
    seen: set[int] = set()
    for d in (0, 1):
        site.set_day(d)
        t = site.now()
        result = run_news(site, tmp_path / "crawl", tag=f"day{d}")
        assert result.returncode == 0, result.log[-3000:]
        assert result.stats["finish_reason"] == "finished"
        listed = {a.id for s in range(site.sections) for a in site.listing_at(s, t)}
        answering = {i for i in listed if site.item_at(i, t) is not None}
        got = {item["id"] for item in result.items}
        assert got == answering
        assert all(site.is_fresh(item, t) for item in result.items)
        assert all(item["title"] == item["title"].strip() for item in result.items)  # the cleaning pipeline ran
        seen |= got
    assert site.requests("/robots.txt") >= 1
    assert site.requests("/private/") == 0
    assert len(seen) > len(got)  # day 1 brought new articles
    assert (tmp_path / "crawl" / "state.sqlite").exists()
