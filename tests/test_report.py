"""``scrapy costsched-report`` after real crawls: its figures against the crawls' own stats and the store."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import pytest

from scrapy_costsched.pages import BODY_SHOWN, PageState
from scrapy_costsched.report.terminal import _table, amount
from scrapy_costsched.storage import SqliteDictStorage
from tests.helpers import PROJECT, ROOT, CrawlResult, DemoSite, crawl, read_state, start_site

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

#: Two shadow days (onboarding), then two days under a budget.
BUDGETS = (None, None, 25, 25)


class History:
    def __init__(self, site: DemoSite, state: Path, runs: list[CrawlResult]) -> None:
        self.site, self.state, self.runs = site, state, runs

    def report(self, *options: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``scrapy costsched-report`` in the example project, for its spider, at the time of the last crawl."""
        env = dict(os.environ, DEMO_CLOCK_FILE=str(self.site.clock_file),
                   PYTHONPATH=os.pathsep.join([str(PROJECT), str(ROOT), os.environ.get("PYTHONPATH", "")]))
        proc = subprocess.run([sys.executable, "-m", "scrapy", "costsched-report", "-s",
                               f"COSTSCHED_STATE={self.state}", *options],
                              cwd=PROJECT, env=env, capture_output=True, text=True, timeout=120, check=False)
        if check:
            assert proc.returncode == 0, proc.stderr[-3000:]
        return proc

    def json(self, *options: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.report("--json", *options).stdout)
        return data


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[History]:
    tmp = tmp_path_factory.mktemp("report")
    mp = pytest.MonkeyPatch()
    mp.setenv("DEMO_CLOCK_FILE", str(tmp / "clock"))
    site, server = start_site(tmp, products=40, categories=2, seed=3, horizon_days=10, hosts=("honour", "ignore"))
    state = tmp / "state.sqlite"
    runs = []
    for day, budget in enumerate(BUDGETS):
        site.set_time(site.day(day))
        # A progress line every 0.1 s (the default is a minute): each run lasts longer than that.
        result = crawl(site, tmp / f"day{day}", state=state, budget=budget, tag=f"day{day}",
                       settings={"COSTSCHED_LOG_INTERVAL": "0.1", "DOWNLOAD_DELAY": "0.01"})
        assert result.returncode == 0, result.log[-3000:]
        runs.append(result)
    site.set_time(site.day(len(BUDGETS) - 1, hour=12))
    yield History(site, state, runs)
    server.close()
    mp.undo()


def _observed_304s(stats: dict[str, Any]) -> int:
    return int(stats.get("costsched/not_modified", 0) - stats.get("costsched/not_modified/false", 0)
               - stats.get("costsched/not_modified/discarded", 0))


def test_each_period_matches_its_crawl(history: History) -> None:
    report = history.json()
    assert [p["budget"] for p in report["periods"]] == list(BUDGETS)
    assert [p["shadow"] for p in report["periods"]] == [b is None for b in BUDGETS]
    for period, run in zip(report["periods"], history.runs, strict=True):
        stats, figures = run.stats, period["figures"]
        assert period["spent"] == stats["costsched/period_spent"]
        assert figures["spent"] == pytest.approx(stats["costsched/spent"])
        assert period["unattributed"] == 0  # every run closed
        assert figures["visits"] == stats["costsched/visits"]
        assert figures["by_reason"] == {reason: stats[f"costsched/visits/{reason}"]
                                        for reason in ("discovery", "refresh") if f"costsched/visits/{reason}" in stats}
        assert figures["new"] == stats.get("costsched/baseline", 0)
        assert figures["rebaselined"] == stats.get("costsched/rebaseline", 0)
        assert figures["changed"] == stats.get("costsched/changed", 0)
        # The crawl's "unchanged" stat counts 304s too.
        assert figures["no_change"] == stats.get("costsched/unchanged", 0)
        assert figures["not_modified"] == _observed_304s(stats)
        if figures["changed"]:
            assert figures["cost_per_change"] == pytest.approx(stats["costsched/spent"] / figures["changed"])
    budgeted = report["periods"][2:]
    assert all(p["figures"]["changed"] > 0 and p["figures"]["no_change"] > 0 for p in budgeted)
    assert sum(p["figures"]["not_modified"] for p in budgeted) > 0  # the honest host earned validators


def test_hosts_types_and_pages_add_up_to_the_store(history: History) -> None:
    report, stored = history.json(), read_state(history.state)
    pages = stored["pages"].values()
    totals = report["totals"]
    for scope in ("hosts", "page_types"):
        for name in ("visits", "changed", "no_change", "attempts"):
            assert sum(row["figures"][name] for row in report[scope]) == totals[name], (scope, name)
        assert sum(row["figures"]["spent"] for row in report[scope]) == pytest.approx(totals["spent"])
    assert totals["spent"] == pytest.approx(sum(p["spent"] for p in report["periods"]))
    for host in report["hosts"]:
        assert host["pages"] == sum(p["host"] == host["host"] for p in pages)
        assert host["etag"] in ("trusted", "probation", "distrusted", "none")
    verdicts = {host["host"]: host["not_modified_answers"] for host in report["hosts"]}
    assert verdicts == {"127.0.0.1": "trusted", "127.0.0.2": "ignored"}  # the demo's honest and ignoring hosts
    wasteful = report["wasteful_pages"]
    assert wasteful[0]["no_change_cost"] == max(p["no_change_cost"] for p in pages) > 0
    assert wasteful[0]["no_change_cost"] >= wasteful[-1]["no_change_cost"]
    plan = report["next_plan"]
    assert plan
    ranked = [p["index"] for p in plan if not p["scout"]]  # a scout goes first whatever its index
    assert ranked == sorted(ranked, reverse=True)
    assert {p["url"] for p in plan} <= {p["url"] for p in pages}
    assert report["dataset"]["pages"] == len(pages)
    assert 0 < report["dataset"]["freshness"] < 1
    stale = report["dataset"]["expected_stale_pages"]
    assert 0 < stale < report["dataset"]["expected_missed_changes"]
    assert stale < sum(p["last_visit"] is not None for p in pages)


def test_shadow_periods_price_smaller_budgets(history: History) -> None:
    savings = history.json()["shadow_savings"]
    shadow_spend = sum(run.stats["costsched/spent"] for run in history.runs[:2]) / 2
    assert [s["budget"] for s in savings] == pytest.approx([share * shadow_spend for share in (0.25, 0.5, 0.75)])
    freshness = [s["freshness_at_budget"] for s in savings]
    assert freshness == sorted(freshness)  # more budget, fresher
    assert all(f <= s["freshness_full"] + 1e-9 for f, s in zip(freshness, savings, strict=True))


def test_terminal_report_fits_100_columns_and_shows_the_figures(history: History) -> None:
    report, text = history.json(), history.report().stdout
    assert max(map(len, text.splitlines())) <= 100
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line[:4].isdigit()}
    for period in report["periods"]:
        row = rows[period["start"][:10]]
        assert row[2] == amount(period["spent"], "requests")
        assert row[6] == amount(period["figures"]["cost_per_change"], "requests")
    for host in report["hosts"]:
        assert host["host"] in text
    assert "Next plan" in text
    assert report["next_plan"][0]["url"] in text


def test_a_table_gives_up_width_to_fit_100_columns_and_keeps_every_figure() -> None:
    """Found on a job board's trial: a host's row with a rate and its spread ran the Hosts table to 101 columns (a
    host's long name, to 123). Notes in brackets wrap below their figures first, then the first column narrows, then
    the widest others wrap, none below its header."""
    headers = ["host", "pages", "visits", "spent", "changed", "per change", "no-change", "its cost", "304s", "rate"]
    row = ["shop.example-wholesale-catalogue.co.uk", "12,345", "23,456", "1.23 MB", "3,456", "356.48 kB",
           "19,999 (85%)", "1.01 MB", "44%", "0.0279 (0.028-0.028)"]
    lines = _table("Hosts", "caption", headers, [row]).splitlines()
    assert max(map(len, lines)) <= 100
    assert lines[3].split() == " ".join(headers).split()
    assert lines[4].split() == ["-" * len(h) for h in headers]
    assert len(lines) > 6  # the row took more than one line
    flat = " ".join(" ".join(lines[5:]).split())
    assert all(part in flat for cell in row[1:] for part in cell.split())
    assert "".join(line.split()[0] for line in lines[5:] if line[0] != " ") == row[0]  # the host's name, wrapped
    assert "1.23 MB" in lines[5]
    assert "0.0279" in lines[5]
    assert "(0.028-0.028)" in lines[6]
    # A table that fits keeps its widths: the first column wraps at FIRST_COLUMN only.
    narrow = _table("T", "c", ["host", "pages"], [["h" * 40, "1"]]).splitlines()
    assert narrow[5:] == ["h" * 30 + "  1", "h" * 10]


def test_a_form_s_pages_which_share_a_url_are_told_apart_by_method_and_body(history: History, tmp_path: Path) -> None:
    """Two result pages of a search form: POSTs to one URL that differ by body, each a row of its own."""
    copy = tmp_path / "state.sqlite"
    shutil.copyfile(history.state, copy)
    url = f"{history.site.url}/search"
    store = SqliteDictStorage(copy)
    store.open()
    try:
        for n, (key, data) in enumerate(sorted(read_state(copy)["pages"].items())[:2], 1):
            page = PageState.from_json(data)
            assert page.template is not None
            body = f"q={'storm' * 40 * (n - 1)}&page={n}"  # the second is too long for a column
            page.url, page.no_change_cost = url, 1e6  # the costliest pages: the first rows
            page.template = {**page.template, "url": url, "method": "POST", "body": body}
            store.put_page(key, page.to_json(), page.summary())
    finally:
        store.close()
    copied = History(history.site, copy, history.runs)
    short, long = sorted(p["form"] for p in copied.json()["wasteful_pages"][:2])
    assert short == "POST 'q=&page=1'"
    assert long.startswith("POST 'q=storm")
    assert long.endswith("storm&page=2'")  # shortened in the middle
    assert "..." in long
    assert len(long) == len("POST ''") + BODY_SHOWN
    plan = copied.json()["next_plan"]
    assert all((p["form"] is not None) == (p["url"] == url) for p in plan)  # the other pages are plain GETs
    text = copied.report().stdout
    assert max(map(len, text.splitlines())) <= 100
    assert "/search [POST 'q=&page=1']" in text
    # The body is cut in the middle, its tail kept, and the URL, which says where the form goes, is whole.
    assert re.search(r"/search \[POST 'q=\w*\.\.\.\w*&page=2'\]$", text, re.MULTILINE)


def test_pages_that_moved_are_counted_among_the_gone_and_shown_with_their_new_url(history: History,
                                                                                 tmp_path: Path) -> None:
    copy = tmp_path / "state.sqlite"
    shutil.copyfile(history.state, copy)
    gone_before = history.json()["dataset"]["gone"]
    store = SqliteDictStorage(copy)
    store.open()
    try:
        # The page that spent most on no-change fetches: first among the report's wasteful pages.
        key, data = max(((key, data) for key, data in read_state(copy)["pages"].items() if not data["gone"]),
                        key=lambda item: (item[1]["no_change_cost"], item[0]))
        page = PageState.from_json(data)
        page.gone, page.moved_to = True, f"{history.site.url}/new-home"
        store.put_page(key, page.to_json(), page.summary())
    finally:
        store.close()
    copied = History(history.site, copy, history.runs)
    dataset = copied.json()["dataset"]
    assert (dataset["gone"], dataset["moved"]) == (gone_before + 1, 1)
    text = copied.report().stdout
    assert f"{gone_before + 1} gone (1 of them moved);" in " ".join(text.split())
    wasteful = copied.json()["wasteful_pages"]
    assert [(p["url"], p["moved_to"]) for p in wasteful if p["moved_to"]] == [(page.url, page.moved_to)]
    # The row of a URL that moved is the widest: it wraps to fit 100 columns (it ran to 115).
    assert max(map(len, text.splitlines()[1:])) <= 100
    assert f"(moved to {page.moved_to})" in " ".join(text.split())


def test_pages_not_found_since_their_last_visit_are_live_but_stale(history: History, tmp_path: Path) -> None:
    """Found in a classifieds trial: expired listings that had answered a 404 once, or come back without their
    items, counted as live pages as fresh as their rates said."""
    copy = tmp_path / "state.sqlite"
    shutil.copyfile(history.state, copy)
    before = history.json()["dataset"]
    store = SqliteDictStorage(copy)
    store.open()
    try:
        visited = [(key, data) for key, data in sorted(read_state(copy)["pages"].items())
                   if not data["gone"] and data["last_visit"] is not None]
        for (key, data), strikes in zip(visited[:2], ({"gone_strikes": 1}, {"empty_strikes": 2}), strict=True):
            page = PageState.from_json({**data, **strikes})
            store.put_page(key, page.to_json(), page.summary())
    finally:
        store.close()
    copied = History(history.site, copy, history.runs)
    dataset = copied.json()["dataset"]
    assert (dataset["live"], dataset["missing"]) == (before["live"], 2)
    assert dataset["freshness"] < before["freshness"]
    assert dataset["expected_stale_pages"] > before["expected_stale_pages"]
    assert f"{before['live']} live ({before['never_visited']} never visited, 2 not found since their last visit)" in (
        " ".join(copied.report().stdout.split()))


def test_filters_and_errors(history: History) -> None:
    two = history.json("--last", "2")
    assert [p["period"] for p in two["periods"]] == [p["period"] for p in history.json()["periods"][-2:]]
    honest = history.json("--host", "127.0.0.1")
    assert [h["host"] for h in honest["hosts"]] == ["127.0.0.1"]
    assert all("127.0.0.1" in p["url"] for p in honest["next_plan"] + honest["wasteful_pages"])
    assert sum(p["spent"] for p in honest["periods"]) == honest["hosts"][0]["figures"]["spent"]
    assert honest["totals"]["spent"] < history.json()["totals"]["spent"]
    missing = history.report("-s", f"COSTSCHED_STATE={history.state.parent / 'nope.sqlite'}", check=False)
    assert missing.returncode != 0
    assert "There is no costsched state" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_progress_is_logged_during_a_crawl(history: History) -> None:
    shadow, budgeted = history.runs[0].log, history.runs[2].log
    assert "costsched: shadow mode; this run:" in shadow
    assert "of 25 requests spent this period; this run:" in budgeted


def test_the_command_imports_nothing_heavy_when_scrapy_starts() -> None:
    """Scrapy imports every command module at each start (``scrapy crawl`` too): the report's libraries wait."""
    heavy = ("matplotlib", "jinja2", "tabulate", "scrapy_costsched.report")
    probe = ("import sys, scrapy_costsched.commands.report; "
             f"print(','.join(m for m in {heavy!r} if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    assert proc.stdout.strip() == ""


def test_a_host_paused_as_down_says_so_beside_when_its_pause_ends(history: History, tmp_path: Path) -> None:
    copy = tmp_path / "state.sqlite"
    shutil.copyfile(history.state, copy)
    name, row = next((name, row) for name, row in read_state(copy)["meta"].items()
                     if name.startswith("host:") and "health" in row)
    store = SqliteDictStorage(copy)
    store.open()
    try:  # as a crawl that found its pages failing in a row left it (an hour on the wall clock, as pauses run)
        store.set_meta(name, {**row, "health": {**row["health"], "blocked_until": time.time() + 3600.0,
                                                "outages": 1, "outage": True}})
    finally:
        store.close()
    copied = History(history.site, copy, history.runs)
    hosts = {h["host"]: h for h in copied.json()["hosts"]}
    down = hosts[name.removeprefix("host:")]
    assert down["blocked_because"] == "down"
    assert down["blocked_until"] is not None
    assert all(h["blocked_because"] is None for h in hosts.values() if h is not down)
    text = copied.report().stdout
    signals = text.split("Host signals")[1].split("Page types")[0]
    assert down["blocked_until"] in signals
    assert "(down)" in signals  # beside the time, or below it where the table needs the width
