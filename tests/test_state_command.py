"""``scrapy costsched-state show|export|import`` on the state of two days of real crawls of ``tests/news_project``."""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
from typing import TYPE_CHECKING

import pytest

from scrapy_costsched.commands.state import EXPORT_FORMAT
from scrapy_costsched.learner import DAY
from scrapy_costsched.model import p_changed
from scrapy_costsched.model.scoring import Candidate, score
from scrapy_costsched.pages import PageState
from scrapy_costsched.storage import SCHEMA_VERSION, SqliteDictStorage
from tests.helpers import read_state
from tests.newssite import NewsSite, costsched_state, run_news

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Iterator
    from pathlib import Path

    from scrapy import Request


class PathFingerprinter:
    """Keys requests by their path alone: not the fingerprinter the crawls used."""

    def fingerprint(self, request: Request) -> bytes:
        return hashlib.sha1(request.url.split("/", 3)[-1].encode()).digest()


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NewsSite, Path]]:
    """The news site, and the state two daily crawls left: a full one on day 0, a budgeted one on day 1."""
    tmp = tmp_path_factory.mktemp("history")
    with NewsSite(tmp / "clock", sections=3) as site:
        for day, budget in ((0, None), (1, 40)):
            site.set_day(day)
            result = run_news(site, tmp / "crawl", budget=budget, tag=f"day{day}")
            assert result.returncode == 0, result.log[-3000:]
        site.set_day(2)
        yield site, tmp / "crawl" / "state.sqlite"


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    """The one-line error a refused command printed (its exit status is 2, and there is no traceback)."""
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    prog, _, error = proc.stderr.strip().splitlines()[-1].partition(": error: ")
    assert prog == "__main__.py", proc.stderr[-3000:]  # `python -m scrapy`; `scrapy` prints "scrapy: error: "
    return error


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_show_prints_a_page_as_stored(history: tuple[NewsSite, Path]) -> None:
    site, state = history
    pages = read_state(state)["pages"]
    key, record = next((key, page) for key, page in sorted(pages.items())
                       if "/article/" in page["url"] and page["visits"] == 2 and page["estimate"])
    shown = json.loads(costsched_state(site, "show", record["url"], "--state", str(state), "--json").stdout)

    assert (shown["fingerprint"], shown["url"], shown["page_type"]) == (key, record["url"], "article")
    assert [shown[name] for name in ("visits", "changes", "failures", "gone")] == [
        record[name] for name in ("visits", "changes", "failures", "gone")]
    now, last_visit = site.now(), record["last_visit"]
    assert shown["now"]["epoch"] == now
    assert shown["last_visit"]["epoch"] == last_visit
    assert shown["last_visit"]["age_days"] == pytest.approx(1.0)  # visited on day 1, shown on day 2
    assert shown["first_seen"]["epoch"] == record["first_seen"]
    rate, low, high = record["estimate"]
    assert shown["rate_per_day"] == {"rate": rate, "low": low, "high": high, "source": "estimate"}
    assert shown["p_changed"] == pytest.approx(p_changed(rate, (now - last_visit) / DAY), rel=1e-12)
    # The index the scheduler gives the page: value × U(t) / cost over the rate's interval, one plan a day.
    cost = shown["cost"]
    assert (cost["unit"], cost["full"]) == ("requests", 1.0)
    candidate = Candidate(key, 1.0, rate, (now - last_visit) / DAY, 1.0, cost["not_modified"], low, high)
    assert shown["index"] == pytest.approx(score(candidate, "freshness", cycle=1.0), rel=1e-12)
    assert shown["index"] > 0
    assert shown["validators"]["last_modified"]["epoch"] == record["last_modified"]
    assert shown["bytes"]["full"]["count"] == record["full_bytes"][1]
    assert shown["host_paused_until"] is None  # its host asked for no pause (tests/test_health.py shows one)
    assert shown["template"]["callback"] == "parse_article"
    assert shown["template"]["meta"] == record["template"]["meta"]

    text = costsched_state(site, "show", record["url"], "--state", str(state)).stdout
    assert re.search(rf"^url +{re.escape(record['url'])}$", text, re.MULTILINE)
    assert re.search(rf"^visits +{record['visits']}, {record['changes']} changed, 0 failed", text, re.MULTILINE)
    assert re.search(rf"^last visit +{shown['last_visit']['iso']} \(24.0 h ago\)$", text, re.MULTILINE)
    assert re.search(rf"^change rate +{rate:.4g} changes a day \(90% interval {low:.4g} to {high:.4g}\)$", text,
                     re.MULTILINE)
    assert re.search(r"^template +GET callback=parse_article ", text, re.MULTILINE)


def test_show_finds_a_page_by_its_stored_url(history: tuple[NewsSite, Path]) -> None:
    """Under another fingerprinter the URL's fingerprint is no key of the state: the page is found by URL."""
    site, state = history
    pages = read_state(state)["pages"]
    key, record = next((key, page) for key, page in sorted(pages.items()) if "/section/" in page["url"])
    shown = json.loads(costsched_state(site, "show", record["url"], "--state", str(state), "--json", "-s",
                                       f"REQUEST_FINGERPRINTER_CLASS={__name__}.PathFingerprinter").stdout)
    assert (shown["fingerprint"], shown["url"], shown["visits"]) == (key, record["url"], record["visits"])
    assert shown["new_pages_per_day"] > 0  # a section reveals new articles
    assert shown["new_page_kind"] == "article"  # as the spider's requests for them declare
    assert shown["new_page_rate_per_day"] > 0


def test_show_lists_the_pages_stored_with_one_url_and_shows_each_by_fingerprint(
        history: tuple[NewsSite, Path], tmp_path: Path) -> None:
    """A search form's result pages are POSTs to one URL that differ by body: each is a page of its own."""
    site, state = history
    copy = tmp_path / "state.sqlite"
    shutil.copyfile(state, copy)
    url = f"{site.url}/search"
    store = SqliteDictStorage(copy)
    store.open()
    try:
        section = next(record for record in read_state(copy)["pages"].values() if "/section/" in record["url"])
        for page in (1, 2):
            body = f"q=storm&page={page}"
            template = {**section["template"], "url": url, "method": "POST", "body": body}
            record = PageState.from_json({**section, "url": url, "template": template})
            store.put_page(hashlib.sha1(body.encode()).hexdigest(), record.to_json(), record.summary())
    finally:
        store.close()
    first, second = (hashlib.sha1(f"q=storm&page={page}".encode()).hexdigest() for page in (1, 2))
    error = one_line_error(costsched_state(site, "show", url, "--state", str(copy), ok=False))
    assert error == (f"2 pages are stored with the URL {url} (requests that differ in method or body): show one by "
                     f"its fingerprint: {first} (POST 'q=storm&page=1'); {second} (POST 'q=storm&page=2')")
    text = costsched_state(site, "show", second, "--state", str(copy)).stdout
    assert re.search(rf"^fingerprint +{second}$", text, re.MULTILINE)
    assert re.search(r"^template +POST callback=parse_section .* body='q=storm&page=2'$", text, re.MULTILINE)


def test_show_refuses_a_url_that_is_not_in_the_state(history: tuple[NewsSite, Path]) -> None:
    site, state = history
    error = one_line_error(costsched_state(site, "show", f"{site.url}/article/999999", "--state", str(state),
                                           ok=False))
    assert error == (f"{site.url}/article/999999 is not a page of the costsched state {str(state)!r} (pages are "
                     "the requests the spider yields; a URL reached only through a redirect is part of the visits "
                     "of the pages that redirect to it)")


def test_export_then_import_then_export_is_identical_and_the_import_crawls_on(
    history: tuple[NewsSite, Path], tmp_path: Path,
) -> None:
    site, state = history
    exported = tmp_path / "state.jsonl"
    costsched_state(site, "export", str(exported), "--state", str(state))
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    stored = read_state(state)
    assert lines[0] == {"format": EXPORT_FORMAT, "version": SCHEMA_VERSION}
    assert lines[1:] == [{"meta": key, "value": value} for key, value in sorted(stored["meta"].items())] + [
        {"page": key, "value": value} for key, value in sorted(stored["pages"].items())]

    imported = tmp_path / "imported" / "state.sqlite"
    done = costsched_state(site, "import", str(exported), "--state", str(imported))
    assert done.stdout.strip() == (f"Imported {len(stored['pages'])} pages and {len(stored['meta'])} meta rows "
                                   f"from {exported} into {imported}")
    again = costsched_state(site, "export", "-", "--state", str(imported))
    assert again.stdout == exported.read_text()
    piped = tmp_path / "piped.sqlite"
    costsched_state(site, "import", "-", "--state", str(piped), stdin=again.stdout)
    assert costsched_state(site, "export", "-", "--state", str(piped)).stdout == again.stdout
    assert read_state(imported)["plan"] == stored["plan"]

    # The third day, crawled from the imported state and from a copy of the original: the same crawl. No
    # known page is new to it (a crawl from an empty state would count every page as a baseline).
    shutil.copy(state, tmp_path / "state.sqlite")
    runs = {}
    for name, workdir in (("original", tmp_path), ("imported", imported.parent)):
        result = run_news(site, workdir, tag=f"day2-{name}")
        assert result.returncode == 0, result.log[-3000:]
        assert "costsched: continuing state" in result.log
        runs[name] = result.stats
    outcomes = ("costsched/visits/discovery", "costsched/visits/refresh", "costsched/baseline", "costsched/changed",
                "costsched/unchanged")
    assert [runs["imported"].get(stat, 0) for stat in outcomes] == [runs["original"].get(stat, 0) for stat in outcomes]
    new = {item["url"] for item in result.items} - {page["url"] for page in stored["pages"].values()}
    assert runs["imported"]["costsched/visits/discovery"] == runs["imported"]["costsched/baseline"] == len(new)
    assert runs["imported"]["costsched/visits/refresh"] > len(new)


def test_import_refuses_a_state_that_is_not_empty_or_in_use(history: tuple[NewsSite, Path], tmp_path: Path) -> None:
    site, state = history
    exported = tmp_path / "state.jsonl"
    costsched_state(site, "export", str(exported), "--state", str(state))
    target = tmp_path / "crawled.sqlite"
    shutil.copy(state, target)
    before = digest(target)
    error = one_line_error(costsched_state(site, "import", str(exported), "--state", str(target), ok=False))
    assert error == (f"The costsched state {str(target)!r} is not empty; import into a new state "
                     "(another --state path), or move this one away first.")
    assert digest(target) == before

    in_use = tmp_path / "in_use.sqlite"
    holder = SqliteDictStorage(in_use)  # another process's crawl, as far as the lock goes
    holder.open()
    try:
        before = digest(in_use)
        error = one_line_error(costsched_state(site, "import", str(exported), "--state", str(in_use), ok=False))
        assert error == (f"The costsched state {str(in_use)!r} is in use by another process; run "
                         "one crawl per state file, or give each its own COSTSCHED_STATE.")
        assert digest(in_use) == before
    finally:
        holder.close()
    assert read_state(in_use)["pages"] == {}
    # Empty, as a crawl refused at once leaves it: the import goes in.
    costsched_state(site, "import", str(exported), "--state", str(in_use))
    assert read_state(in_use)["pages"] == read_state(state)["pages"]


def _with_line(lines: list[str], number: int, text: str) -> list[str]:
    return [*lines[:number - 1], text, *lines[number:]]


def _page_without(lines: list[str], field: str) -> list[str]:
    row = json.loads(lines[-1])
    del row["value"][field]
    return _with_line(lines, len(lines), json.dumps(row))


MANGLED = {
    "not JSON": (lambda lines: _with_line(lines, 3, lines[2][:40]), "line 3: not JSON"),
    "not an export": (lambda lines: _with_line(lines, 1, '{"format": "scrapy-costsched", "version": 2}'),
                      "line 1: not a scrapy-costsched export"),
    "newer": (lambda lines: _with_line(lines, 1, json.dumps({"format": EXPORT_FORMAT, "version": 99})),
              f"line 1: an export of schema version 99, and this scrapy-costsched imports version {SCHEMA_VERSION}"),
    "no url": (lambda lines: _page_without(lines, "url"), "malformed page record"),
    "twice": (lambda lines: [*lines, lines[-1]], "appears twice (also on line"),
    "NaN": (lambda lines: _with_line(lines, len(lines), lines[-1].replace('"first_seen":', '"first_seen":NaN,"x":')),
            "NaN is not a JSON number"),
    "neither meta nor page": (lambda lines: _with_line(lines, 2, '{"meta": "a", "page": "b"}'),
                              'line 2: expected {"meta": KEY, "value": ...} or {"page": FINGERPRINT'),
}


@pytest.mark.parametrize("mangled", MANGLED)
def test_import_refuses_a_malformed_file_and_writes_nothing(
    history: tuple[NewsSite, Path], tmp_path: Path, mangled: str,
) -> None:
    site, state = history
    exported = tmp_path / "state.jsonl"
    costsched_state(site, "export", str(exported), "--state", str(state))
    mangle, problem = MANGLED[mangled]
    broken = tmp_path / "broken.jsonl"
    lines = mangle(exported.read_text().splitlines())
    broken.write_text("\n".join(lines) + "\n")
    target = tmp_path / "new" / "state.sqlite"
    error = one_line_error(costsched_state(site, "import", str(broken), "--state", str(target), ok=False))
    assert error.startswith(f"{broken} line ")
    assert problem in error
    assert error.endswith("; nothing was imported.")
    assert not target.parent.exists()


def test_show_and_export_read_a_state_a_crawl_holds(history: tuple[NewsSite, Path], tmp_path: Path) -> None:
    site, state = history
    free = tmp_path / "free.jsonl"
    costsched_state(site, "export", str(free), "--state", str(state))
    held = tmp_path / "held.sqlite"
    shutil.copy(state, held)
    url = next(page["url"] for page in read_state(held)["pages"].values() if "/article/" in page["url"])
    holder = SqliteDictStorage(held)
    holder.open()
    try:
        assert costsched_state(site, "export", "-", "--state", str(held)).stdout == free.read_text()
        shown = json.loads(costsched_state(site, "show", url, "--state", str(held), "--json").stdout)
        assert shown["url"] == url
        assert math.isfinite(shown["index"])
    finally:
        holder.close()
