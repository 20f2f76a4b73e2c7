"""Conditional requests in real crawls: hosts that honour, ignore, rotate or fake validators, and none.

One site serves the demo shop's products from six loopback hosts, one validator behaviour each
(``example_project/demo_site``), and logs the bytes it reads and writes per request and whether a
page truly changed since the validators a request sent. Daily ``scrapy crawl`` runs on a budget that
pays for every page every day show what each host earns and what it costs, by the server's own counts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import pytest

from scrapy_costsched.model.validators import PROBATION_DAYS
from tests.helpers import DemoSite, crawl, read_state, runspider, start_site
from tests.mockserver import EdgeSite, ForwardProxy

from demo_site.catalog import DAY as DAY_SECONDS  # isort: skip  (example_project is on the path via tests.helpers)
from demo_shop.settings import COSTSCHED_VALUE_TIERS  # isort: skip
from demo_site.evaluate import Dataset, freshness  # isort: skip
from demo_site.wire import read_byte_log  # isort: skip

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

HOSTS = ("honour", "ignore", "rotate", "false304", "none", "rotate:volatile")
DAYS = 6
AMPLE = 10_000  # requests a day: every page, every day
SMALL_PAGE = 5000  # bytes


@pytest.fixture(scope="module")
def multi_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DemoSite, Any, Path]]:
    tmp = tmp_path_factory.mktemp("hosts")
    mp = pytest.MonkeyPatch()
    mp.setenv("DEMO_CLOCK_FILE", str(tmp / "clock"))
    byte_log = tmp / "bytes.jsonl"
    site, server = start_site(tmp, hosts=HOSTS, byte_log=byte_log, products=120, categories=4, seed=11,
                              horizon_days=DAYS + 5)
    yield site, server, byte_log
    server.close()
    mp.undo()


@pytest.fixture(scope="module")
def history(multi_host: tuple[DemoSite, Any, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A daily crawl of every page, with each day's stats, state and server log."""
    site, server, byte_log = multi_host
    work = tmp_path_factory.mktemp("history")
    offset = 0
    days = []
    for day in range(1, DAYS + 1):
        site.set_time(site.day(day))
        result = crawl(site, work, budget=AMPLE, tag=f"day{day}")
        assert result.returncode == 0, result.log[-3000:]
        entries, offset = read_byte_log(byte_log, offset)
        days.append({"day": day, "stats": result.stats, "log": entries,
                     "state": read_state(work / "state.sqlite")})
    return {"days": days, "hosts": {mode: urlparse(server.url_for(mode.partition(":")[0]) if ":" not in mode
                                                   else server.urls[HOSTS.index(mode)]).hostname
                                    for mode in HOSTS}}


def _entries(history: dict[str, Any], mode: str, since_day: int = 1) -> list[dict[str, Any]]:
    host = history["hosts"][mode]
    return [e for day in history["days"][since_day - 1:] for e in day["log"] if e["host"] == host]


def _verdict(day: dict[str, Any], host: str, signal: str) -> str | None:
    return day["stats"].get(f"costsched/hosts/{host}/{signal}")


def test_an_unchanged_visit_to_an_honouring_host_costs_a_tenth_of_a_full_fetch(history: dict[str, Any]) -> None:
    full: dict[str, int] = {}
    ratios = []
    for entry in _entries(history, "honour"):
        size = entry["sent"] + entry["received"]
        if entry["status"] == 200:
            full[entry["path"]] = size
        # Pages of the size of real ones: a 304 of a few hundred bytes cannot be a tenth of a page that
        # small itself (the demo's front page is 300 bytes).
        elif entry["status"] == 304 and full.get(entry["path"], 0) >= SMALL_PAGE:
            assert entry["changed_since_validators"] is False  # an honest 304
            ratios.append(size / full[entry["path"]])
    assert len(ratios) >= 10, "the honouring host was sent conditional requests and answered 304"
    assert max(ratios) <= 0.10, f"a 304 cost {max(ratios):.1%} of a full fetch of the same page"


def test_a_host_that_answers_304_to_everything_is_caught_by_its_first_conditional_request(
        history: dict[str, Any]) -> None:
    host = history["hosts"]["false304"]
    caught = next((d for d in history["days"] if _verdict(d, host, "not_modified") == "false"), None)
    assert caught is not None, "the false-304 host was never caught"
    answered, verified, false = caught["state"]["meta"][f"host:{host}"]["validators"]["answers"][:3]
    assert (answered, verified, false) == (0, 0, 1)  # no 304 of it was ever believed
    first_conditional = next(i for i, e in enumerate(_entries(history, "false304")) if e["conditional"])
    assert _entries(history, "false304")[first_conditional]["status"] == 304
    # From then on (within the probation) it gets no conditional request, and its pages are fetched in full.
    later = _entries(history, "false304", since_day=caught["day"] + 1)
    assert caught["day"] + 1 <= DAYS < caught["day"] + PROBATION_DAYS
    assert later
    assert not any(e["conditional"] for e in later)
    assert all(e["status"] == 200 for e in later)
    assert all(_verdict(d, host, "not_modified") == "false" for d in history["days"][caught["day"]:])


def test_no_false_304_is_taken_for_an_observation(history: dict[str, Any]) -> None:
    host = history["hosts"]["false304"]
    server_304s = sum(e["status"] == 304 for e in _entries(history, "false304"))
    convicted = sum(d["stats"].get("costsched/not_modified/false", 0) for d in history["days"])
    discarded = sum(d["stats"].get("costsched/not_modified/discarded", 0) for d in history["days"])
    assert server_304s == sum(d["stats"].get(f"costsched/not_modified/{host}", 0) for d in history["days"])
    assert server_304s == convicted + discarded
    assert convicted == 1


def test_a_host_that_ignores_validators_stops_receiving_them(history: dict[str, Any]) -> None:
    host = history["hosts"]["ignore"]
    judged = next((d for d in history["days"] if _verdict(d, host, "not_modified") == "ignored"), None)
    assert judged is not None
    later = _entries(history, "ignore", since_day=judged["day"] + 1)
    assert later
    assert not any(e["conditional"] for e in later)


def test_a_rotating_etag_host_gets_if_modified_since_only_while_its_dates_are_trusted(
        history: dict[str, Any]) -> None:
    last = history["days"][-1]
    honest_dates, volatile_dates = history["hosts"]["rotate"], history["hosts"]["rotate:volatile"]
    assert _verdict(last, honest_dates, "etag") == _verdict(last, volatile_dates, "etag") == "volatile"
    assert _verdict(last, honest_dates, "last_modified") == "trusted"
    assert _verdict(last, volatile_dates, "last_modified") != "trusted"
    # The rotating host answers If-None-Match with a full page and honours If-Modified-Since alone:
    # its 304s show the crawler sent the date and no ETag.
    assert any(e["status"] == 304 and e["changed_since_validators"] is False for e in _entries(history, "rotate"))
    assert not any(e["conditional"] for e in _entries(history, "rotate:volatile"))


def test_a_host_without_validators_is_called_so_and_never_sent_any(history: dict[str, Any]) -> None:
    host = history["hosts"]["none"]
    last = history["days"][-1]
    assert _verdict(last, host, "etag") == _verdict(last, host, "last_modified") == "none"
    assert not any(e["conditional"] for e in _entries(history, "none"))


def test_verdicts_and_304_shares_are_in_stats_and_in_the_state(history: dict[str, Any]) -> None:
    last = history["days"][-1]
    stored = {key.removeprefix("host:"): row["validators"] for key, row in last["state"]["meta"].items()
              if key.startswith("host:") and "validators" in row}
    for mode in ("honour", "ignore", "false304"):
        host = history["hosts"][mode]
        assert host in stored
        for signal in ("etag", "last_modified", "not_modified"):
            assert _verdict(last, host, signal) is not None
    honour = history["hosts"]["honour"]
    assert _verdict(last, honour, "etag") == _verdict(last, honour, "not_modified") == "trusted"
    answered, seen = stored[honour]["answers"][0], stored[honour]["seen"][0]
    assert last["stats"][f"costsched/hosts/{honour}/not_modified_share"] == round(answered / (answered + seen), 4)
    assert 0 < answered < answered + seen
    per_host = sum(last["stats"].get(f"costsched/not_modified/{h}", 0) for h in history["hosts"].values())
    assert per_host == last["stats"]["costsched/not_modified"] > 0


def test_byte_counts_agree_with_scrapys_stats_and_the_servers_own(history: dict[str, Any]) -> None:
    for day in history["days"]:
        stats = day["stats"]
        # Scrapy counts responses as they are written, and requests without the ":port" of the Host
        # header the client sends (5 digits for a free port): the middleware counts that too.
        assert stats["costsched/bytes/received"] == stats["downloader/response_bytes"]
        port_bytes = stats["costsched/bytes/sent"] - stats["downloader/request_bytes"]
        assert 0 < port_bytes <= len(":65535") * stats["downloader/request_count"]
        server_sent = sum(e["sent"] for e in day["log"])
        server_received = sum(e["received"] for e in day["log"])
        assert stats["costsched/bytes/received"] == server_sent
        assert stats["costsched/bytes/sent"] == server_received


def test_304s_reach_neither_callback_nor_errback_and_are_not_logged_as_errors(history: dict[str, Any]) -> None:
    for day in history["days"]:
        stats = day["stats"]
        assert stats.get("log_count/ERROR", 0) == 0
        assert "spider_exceptions" not in "".join(stats)
        assert stats.get("httperror/response_ignored_count", 0) == 0
    assert any(e["status"] == 304 for e in _entries(history, "honour"))


#: Of the bytes a full crawl moves: enough to visit every page every day once validators make unchanged pages
#: cheap, not without them (bench/validators.py measures tighter budgets too).
BUDGET_SHARE = 0.9
COMPARE_DAYS = 8


@pytest.fixture(scope="module")
def with_and_without(multi_host: tuple[DemoSite, Any, Path], tmp_path_factory: pytest.TempPathFactory,
                     history: dict[str, Any]) -> dict[str, Any]:
    """The same byte budget a day, conditional requests on and off, scored against the site's truth."""
    site, _, byte_log = multi_host
    work = tmp_path_factory.mktemp("compare")
    full_bytes = sum(e["sent"] + e["received"] for e in history["days"][0]["log"])
    budget = round(BUDGET_SHARE * full_bytes)
    runs: dict[str, dict[str, Any]] = {}
    offset = byte_log.stat().st_size
    for name, conditional in (("on", True), ("off", False)):
        dataset, fresh, spent = Dataset(), [], 0
        for day in range(1, COMPARE_DAYS + 1):
            t = site.day(day)
            site.set_time(t)
            result = crawl(site, work / name, budget=budget, tag=f"day{day}",
                           settings={"COSTSCHED_BILLING": "bandwidth", "COSTSCHED_CONDITIONAL": conditional})
            assert result.returncode == 0, result.log[-3000:]
            entries, offset = read_byte_log(byte_log, offset)
            spent += sum(e["sent"] + e["received"] for e in entries)
            dataset.update(site.catalog, result.items, t)
            fresh.append(freshness(site.catalog, dataset, t, t + DAY_SECONDS, COSTSCHED_VALUE_TIERS).weighted)
        runs[name] = {"freshness": fresh, "bytes": spent, "last_visits": result.stats.get("costsched/visits", 0)}
    return {"budget": budget, **runs}


def test_validators_buy_freshness_and_save_bytes_at_the_same_budget(with_and_without: dict[str, Any]) -> None:
    on, off = with_and_without["on"], with_and_without["off"]
    # Day 1 is the same full discovery in both; from then on validators pay for more visits.
    mean_on, mean_off = (sum(run["freshness"][1:]) / (COMPARE_DAYS - 1) for run in (on, off))
    assert mean_on >= mean_off
    assert on["bytes"] < off["bytes"]
    assert on["last_visits"] > off["last_visits"]


# -- with the Scrapy set-ups users run: retries, a proxy, redirects, compression, the HTTP cache -------------


def _trusted_runs(site: EdgeSite, tmp: Path, runs: int, *settings: str,
                  env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """*runs* runs of the edge spider over a site that honours validators; each run's stats."""
    site.validators = True
    return [runspider(site, tmp, "COSTSCHED_BUDGET=100", *settings, env=env) for _ in range(runs)]


def test_validators_survive_retries_and_go_through_a_proxy(edge_site: EdgeSite, tmp_path: Path) -> None:
    edge_site.flaky_odd = True  # /flaky/2 answers 503 to every other request: each run retries it
    proxy = ForwardProxy()
    try:
        _trusted_runs(edge_site, tmp_path, 3, env={"http_proxy": proxy.url})
        seen = len(edge_site.requests)
        last = runspider(edge_site, tmp_path, "COSTSCHED_BUDGET=100", env={"http_proxy": proxy.url})
    finally:
        proxy.close()
    assert proxy.relayed == len(edge_site.requests)  # every request went through the proxy
    assert last["costsched/not_modified"] >= 2
    flaky = [etag for path, etag in edge_site.requests[seen:] if path == "/flaky/2"]
    assert len(flaky) == 2  # the 503, then the retry
    assert flaky[0] is not None
    assert flaky[0] == flaky[1]  # the retry asked with the same validator, and got its 304


def test_a_page_linked_with_a_fragment_is_sent_its_validators(edge_site: EdgeSite, tmp_path: Path) -> None:
    # The fragment never reaches the server, and Scrapy drops it from the response's URL: the page answered from
    # its own URL. Taken for redirected, it was never sent its validators.
    runs = _trusted_runs(edge_site, tmp_path, 4, env={"EDGE_FRAGMENT": "1"})
    asked = [etag for path, etag in edge_site.requests if path == "/page/8"]
    assert len(asked) == 4
    assert asked[0] is None
    assert asked[-1] == '"page-8-v0"'
    last = runs[-1]
    assert last["costsched/not_modified"] >= 2  # /page/1 and /page/8, each a visit
    assert "edge/callback/304" not in last
    assert "edge/errback/IgnoreRequest" not in last
    page = next(page for page in read_state(tmp_path / "state.sqlite")["pages"].values()
                if page["url"].endswith("/page/8#reviews"))
    assert page["redirected"] is False
    assert page["visits"] == 4


@pytest.mark.parametrize("status", [301, 302])
def test_validators_are_stripped_from_a_redirected_request(edge_site: EdgeSite, tmp_path: Path, status: int) -> None:
    _trusted_runs(edge_site, tmp_path, 3)
    edge_site.moved["/page/1"], edge_site.moved_status = "/page/11", status
    seen = len(edge_site.requests)
    stats = runspider(edge_site, tmp_path, "COSTSCHED_BUDGET=100")
    asked = dict(edge_site.requests[seen:])
    assert asked["/page/1"] is not None  # the page's own validator went to its own URL
    assert asked["/page/11"] is None  # and not to where it now redirects
    assert stats["costsched/conditional/stripped"] >= 1
    seen = len(edge_site.requests)
    runspider(edge_site, tmp_path, "COSTSCHED_BUDGET=100")
    asked = dict(edge_site.requests[seen:])
    if status == 302:
        # The answer came from another URL: its validators are not sent to the page's URL any more.
        assert asked["/page/1"] is None
    else:
        # The page moved: it is visited at its new URL, which earned validators of its own.
        assert "/page/1" not in asked
        assert asked["/page/11"] == '"page-11-v0"'


def test_compressed_pages_are_counted_as_transferred(edge_site: EdgeSite, tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "gzip").mkdir()
    plain = _trusted_runs(edge_site, tmp_path / "plain", 1)[0]
    edge_site.gzip = True
    compressed = _trusted_runs(edge_site, tmp_path / "gzip", 4)
    assert compressed[0]["costsched/bytes/received"] < plain["costsched/bytes/received"] / 2
    for stats in compressed:
        assert stats["costsched/bytes/received"] == stats["downloader/response_bytes"]
    assert compressed[-1]["costsched/not_modified"] >= 2


def test_http_cache_answers_are_flagged_never_visits(edge_site: EdgeSite, tmp_path: Path) -> None:
    cache = ("HTTPCACHE_ENABLED=True", f"HTTPCACHE_DIR={tmp_path / 'cache'}",
             "HTTPCACHE_POLICY=scrapy.extensions.httpcache.RFC2616Policy")
    runs = _trusted_runs(edge_site, tmp_path, 4, *cache)
    last = runs[-1]
    # RFC2616Policy revalidates its copies with the server: a 304 to its validators turns into the cached
    # page, which the server has just confirmed, so each is a visit that finds the page unchanged.
    assert last["httpcache/revalidate"] >= 3
    assert last["costsched/unchanged"] == last["costsched/visits"] == 4
    # A copy the cache answers from alone (its robots.txt here) is flagged and never a visit.
    assert last["costsched/cached"] >= 1


def test_a_304_to_the_add_on_s_validators_is_not_stored_in_the_http_cache(edge_site: EdgeSite, tmp_path: Path) -> None:
    """DummyPolicy stores every answer: a 304 it kept would be the page's copy from then on, an empty page."""
    _trusted_runs(edge_site, tmp_path, 3)
    # The retried answers are kept out of the cache as usage.md advises (a cached 503 would answer each retry).
    cache = ("HTTPCACHE_ENABLED=True", f"HTTPCACHE_DIR={tmp_path / 'cache'}", "HTTPCACHE_IGNORE_HTTP_CODES=503")
    cached = runspider(edge_site, tmp_path, "COSTSCHED_BUDGET=100", *cache)  # an empty cache: all from the site
    assert cached["costsched/not_modified"] >= 2
    # The cache read as plain Scrapy reads it: what it answers is a page, never an empty 304.
    plain = runspider(edge_site, tmp_path, *cache, "COSTSCHED_ENABLED=False")
    assert plain["httpcache/hit"] >= 1
    assert "httperror/response_ignored_status_count/304" not in plain


def test_304s_reach_no_callback_or_errback_unless_the_spider_asks(edge_site: EdgeSite, tmp_path: Path) -> None:
    (tmp_path / "default").mkdir()
    (tmp_path / "deliver").mkdir()
    quiet = _trusted_runs(edge_site, tmp_path / "default", 4)[-1]
    assert quiet["costsched/not_modified"] >= 2
    assert "edge/callback/304" not in quiet
    assert not any(key.startswith("edge/errback") for key in quiet)
    delivered = _trusted_runs(edge_site, tmp_path / "deliver", 4, "COSTSCHED_DELIVER_NOT_MODIFIED=True")[-1]
    assert delivered["edge/callback/304"] == delivered["costsched/not_modified"] >= 2
    assert not any(key.startswith("edge/errback") for key in delivered)
    assert delivered["costsched/unchanged"] == quiet["costsched/unchanged"]  # still one observation per visit


@pytest.mark.parametrize(("etag", "kind"), [("unquoted", "etag_unquoted"), ('"a", "b"', "etag_duplicated"),
                                            ('"' + "x" * 300 + '"', "etag_oversized"), ("", "etag_empty")])
def test_hostile_etags_are_counted_never_raised_and_never_sent(edge_site: EdgeSite, tmp_path: Path, etag: str,
                                                              kind: str) -> None:
    edge_site.page_headers = {"ETag": etag}
    runs = [runspider(edge_site, tmp_path, "COSTSCHED_BUDGET=100") for _ in range(3)]
    assert all(run[f"costsched/invalid/{kind}"] >= 3 for run in runs)
    assert not any(run.get("costsched/conditional/sent") for run in runs)


def test_304s_count_as_visits_where_no_field_changed(tmp_path: Path) -> None:
    """With 304s only changed pages come back in full; counted alone, they would make every field of
    the products look volatile (found trying the add-on on a news site that honours If-Modified-Since)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("DEMO_CLOCK_FILE", str(tmp_path / "clock"))
    site, server = start_site(tmp_path, hosts=("honour", "rotate"), products=80, categories=4, seed=3,
                              horizon_days=12)
    try:
        not_modified = 0
        for day in range(1, 9):
            site.set_time(site.day(day))
            result = crawl(site, tmp_path, budget=AMPLE, tag=f"day{day}")
            assert result.returncode == 0, result.log[-3000:]
            assert "costsched/items/volatile_fields" not in result.stats, f"day {day}"
            not_modified += result.stats.get("costsched/not_modified", 0)
        assert not_modified >= 50
    finally:
        server.close()
        mp.undo()


def test_shadow_mode_sends_no_validators_but_learns_them(multi_host: tuple[DemoSite, Any, Path],
                                                         tmp_path: Path) -> None:
    """A shadow crawl gets exactly what plain Scrapy gets (every item, every day), and starts the trust."""
    site, server, byte_log = multi_host
    offset = byte_log.stat().st_size
    for day in (1, 2, 3):
        site.set_time(site.day(day))
        result = crawl(site, tmp_path, tag=f"day{day}")
        assert result.returncode == 0, result.log[-3000:]
        entries, offset = read_byte_log(byte_log, offset)
        assert not any(e["conditional"] for e in entries)
        assert len(result.items) == len(site.catalog.existing(site.day(day)))
    assert result.stats[f"costsched/hosts/{urlparse(server.url).hostname}/etag"] == "trusted"
