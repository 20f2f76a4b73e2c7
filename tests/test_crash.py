"""``kill -9`` at random points of budgeted runs: the state survives and the period stays within budget.

The demo shop is served by a handler that counts every request it receives (robots.txt included:
it is charged to the budget), so the period's spend is measured where it is paid, not by the ledger
under test. A run may be killed with up to ``CONCURRENT`` requests on the wire that its ledger has not
settled yet, so a period may exceed its budget by that much, and by no more, however many runs die;
and, as the README promises, a kill may leave unspent no more than one chunk of the budget (16
visits, at most 5% of the budget) plus those requests.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import pytest

from scrapy_costsched.ledger import GRANT_CHUNK_SHARE, GRANT_CHUNK_VISITS
from scrapy_costsched.storage import SqliteDictStorage
from tests.helpers import PROJECT, ROOT, DemoSite, crawl, crawl_command, read_state

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from demo_site.catalog import Catalog

BUDGET = 60
CONCURRENT = 8
ROUNDS = 5
#: Each round's kill point, drawn from a seeded RNG: once the server has received this many of the
#: run's requests, plus a delay of up to MAX_EXTRA_DELAY seconds, so that kills also land between
#: requests, in planning and in commits, and sometimes after a run that already ended.
KILL_AFTER_REQUESTS = (1, 40)
MAX_EXTRA_DELAY = 0.3
#: Bounds every wait on a crawl process; a healthy run ends long before.
RUN_TIMEOUT = 120.0
#: What a kill may leave unspent besides the requests in flight: the chunk the ledger commits ahead
#: (docs/usage.md: "one chunk of 64 visits, at most 5% of the budget") and a robots.txt held before it is fetched.
CHUNK = min(GRANT_CHUNK_VISITS, math.ceil(GRANT_CHUNK_SHARE * BUDGET)) + 1


class CountingSite:
    """The demo shop on 127.0.0.1, counting the requests it receives."""

    def __init__(self, catalog: Catalog, clock_file: Path) -> None:
        from demo_site.server import make_handler  # importable once tests.helpers has put the project on the path

        self._lock = threading.Lock()
        self._received = 0
        self.reached = threading.Event()
        self._reach_at: int | None = None
        self._stall: tuple[int, float] | None = None
        count = self._count

        class Handler(make_handler(catalog)):  # type: ignore[misc]
            def do_GET(self) -> None:
                time.sleep(count())
                super().do_GET()

            def do_HEAD(self) -> None:
                time.sleep(count())
                super().do_HEAD()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="counting-demo-site", daemon=True).start()
        self.site = DemoSite(catalog, f"http://127.0.0.1:{self._server.server_address[1]}", clock_file)

    @property
    def received(self) -> int:
        with self._lock:
            return self._received

    def reset(self) -> None:
        with self._lock:
            self._received = 0

    def notify_at(self, received: int) -> None:
        """Set :attr:`reached` once *received* requests in all have come in."""
        with self._lock:
            self._reach_at = received
            self.reached.clear()
            if self._received >= received:
                self.reached.set()

    def stall(self, after: int, seconds: float) -> None:
        """Hold each answer for *seconds* once *after* requests in all have come in."""
        with self._lock:
            self._stall = (after, seconds)

    def _count(self) -> float:
        """Count a request; how long to hold its answer."""
        with self._lock:
            self._received += 1
            if self._reach_at is not None and self._received >= self._reach_at:
                self.reached.set()
            return self._stall[1] if self._stall is not None and self._received > self._stall[0] else 0.0

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture(scope="module")
def killed_period(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A full run on day 1, then on day 3 ROUNDS budgeted runs killed at drawn points and a normal run."""
    from demo_site.catalog import Catalog

    tmp = tmp_path_factory.mktemp("crash")
    mp = pytest.MonkeyPatch()
    mp.setenv("DEMO_CLOCK_FILE", str(tmp / "clock"))
    catalog = Catalog.generate(products=120, categories=4, seed=11, horizon_days=10, new_per_day=0)
    shop = CountingSite(catalog, tmp / "clock")
    rng = random.Random(20260101)
    work = tmp / "work"
    state = work / "state.sqlite"
    try:
        shop.site.set_time(shop.site.day(1))
        seed = crawl(shop.site, work, budget=1000, tag="seed")
        assert seed.returncode == 0, seed.log[-3000:]
        known = page_keys(state)
        assert len(known) > BUDGET  # the budget, not the shop's size, limits the runs below

        shop.site.set_time(shop.site.day(3))  # one budget period for every run below
        shop.reset()
        rounds = []
        for number in range(ROUNDS):
            killed, log = run_and_kill(shop, work, f"round{number}", rng.randint(*KILL_AFTER_REQUESTS),
                                       rng.uniform(0.0, MAX_EXTRA_DELAY))
            # Looked at in a copy: the next run must open the state exactly as the kill left it.
            copy = copy_state(state, tmp / f"after-round{number}")
            after = page_keys(copy)
            rounds.append({"killed": killed, "log": log, "before": known, "after": after,
                           "read": set(read_state(copy)["pages"]), "received": shop.received})
            known = after
        received_before_final = shop.received
        final = crawl(shop.site, work, budget=BUDGET, settings={"CONCURRENT_REQUESTS": CONCURRENT}, tag="final")
        yield {"rounds": rounds, "final": final, "received_before_final": received_before_final,
               "received": shop.received, "state": state, "known": known}
    finally:
        shop.close()
        mp.undo()


def copy_state(state: Path, directory: Path) -> Path:
    """The state file and its journal, if any, copied as they are into *directory*."""
    directory.mkdir()
    for path in (state, state.with_name(state.name + "-journal")):
        if path.exists():
            shutil.copyfile(path, directory / path.name)
    return directory / state.name


def page_keys(state: Path) -> set[str]:
    """The page keys of *state*, opened as the next crawl opens it (which rolls back a hot journal)."""
    store = SqliteDictStorage(state)
    store.open()
    try:
        return {key for key, _ in store.iter_pages()}
    finally:
        store.close()


def run_and_kill(shop: CountingSite, work: Path, tag: str, kill_after: int, extra_delay: float, *,
                 budget: float = BUDGET, settings: dict[str, Any] | None = None,
                 sig: signal.Signals = signal.SIGKILL, again_after: float | None = None) -> tuple[bool, str]:
    """Start a budgeted crawl and send it *sig* (SIGKILL) at the drawn point, and again *again_after* seconds later
    if given, unless it ended first: (whether it got the signal, its log)."""
    cmd, env, _, _ = crawl_command(shop.site, work, budget=budget,
                                   settings={"CONCURRENT_REQUESTS": CONCURRENT, **(settings or {})}, tag=tag)
    log = work / f"{tag}.log"
    shop.notify_at(shop.received + kill_after)
    with log.open("w") as stderr:
        proc = subprocess.Popen(cmd, cwd=PROJECT, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            deadline = time.monotonic() + RUN_TIMEOUT
            while not shop.reached.wait(0.05) and proc.poll() is None:
                assert time.monotonic() < deadline, "the crawl neither reached the kill point nor ended"
            signalled = False
            if proc.poll() is None:
                time.sleep(extra_delay)
                signalled = proc.poll() is None
                if signalled:
                    proc.send_signal(sig)
                if signalled and again_after is not None:
                    time.sleep(again_after)
                    proc.send_signal(sig)
            proc.wait(timeout=RUN_TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    # A kill is told by the exit status; Scrapy exits 0 after the graceful stop a SIGINT asks for.
    return proc.returncode == -signal.SIGKILL if sig is signal.SIGKILL else signalled, log.read_text()


def test_runs_were_killed_mid_period(killed_period: dict[str, Any]) -> None:
    assert any(r["killed"] for r in killed_period["rounds"])  # a run may also end before its kill point


def test_every_kill_leaves_a_state_that_opens_with_every_known_page(killed_period: dict[str, Any]) -> None:
    rounds = killed_period["rounds"]
    for number, round_ in enumerate(rounds):
        assert round_["before"] <= round_["after"], f"round {number}: known pages lost"
        assert round_["read"] == round_["after"]
    for number, round_ in enumerate(rounds):  # each run opened the state the previous kill left
        assert "The costsched state" not in round_["log"], f"round {number}: " + round_["log"][-3000:]
    final = killed_period["final"]
    assert final.returncode == 0, final.log[-3000:]
    assert "The costsched state" not in final.log, final.log[-3000:]
    assert killed_period["known"] <= set(read_state(killed_period["state"])["pages"])


def test_a_run_after_a_kill_says_the_state_was_not_closed(killed_period: dict[str, Any]) -> None:
    """An operator who did not see the kill (an OOM, a container stopped) reads it at the next start; a run
    after one that closed (the seed run, or a round that ended before its kill point) says nothing of it."""
    rounds = killed_period["rounds"]
    # Each run's predecessor: closed, killed mid-run, or killed while closing (after its last line: either way).
    previous = [True] + [None if r["killed"] and "costsched: run finished" in r["log"] else not r["killed"]
                         for r in rounds]
    logs = [r["log"] for r in rounds] + [killed_period["final"].log]
    said = ["costsched: the state was not closed by the run that last wrote it (killed or crashed" in log
            for log in logs]
    assert [not closed for closed in previous if closed is not None] == [
        told for told, closed in zip(said, previous, strict=True) if closed is not None]
    assert any(closed is False for closed in previous)


def test_the_period_stays_within_budget_and_the_requests_in_flight(killed_period: dict[str, Any]) -> None:
    limit = BUDGET + CONCURRENT
    received = [r["received"] for r in killed_period["rounds"]] + [killed_period["received"]]
    assert max(received) <= limit, (
        f"the server received {received} requests after each run of a period with a budget of {BUDGET} "
        f"(at most {CONCURRENT} may have been in flight at a kill)")


def test_a_kill_leaves_unspent_at_most_one_chunk_and_the_requests_in_flight(killed_period: dict[str, Any]) -> None:
    kills = sum(r["killed"] for r in killed_period["rounds"])
    charged = killed_period["final"].stats["costsched/period_spent_at_start"]
    unspent = charged - killed_period["received_before_final"]
    assert unspent <= kills * (CHUNK + CONCURRENT), (
        f"after {kills} kills the ledger charged {charged} for {killed_period['received_before_final']} requests "
        f"received: {unspent} of a budget of {BUDGET} lost")


def test_the_report_shows_what_killed_runs_drew_and_never_booked(killed_period: dict[str, Any]) -> None:
    """A killed run's ledger draws are in its period's spend, not in any host's or page type's accounts: the
    report says so rather than leave the periods' and hosts' totals apart with no word (found in a trial)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PROJECT), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    command = [sys.executable, "-m", "scrapy", "costsched-report", "-s", f"COSTSCHED_STATE={killed_period['state']}"]
    report = json.loads(subprocess.run([*command, "--json"], cwd=PROJECT, env=env, capture_output=True, text=True,
                                       timeout=120, check=True).stdout)
    seeded, killed = report["periods"]
    assert seeded["unattributed"] == 0  # the seed run closed
    assert killed["unattributed"] == pytest.approx(killed["spent"] - killed["figures"]["spent"])
    assert killed["unattributed"] > 0
    assert sum(host["figures"]["spent"] for host in report["hosts"]) == pytest.approx(
        sum(period["spent"] - period["unattributed"] for period in report["periods"]))
    html = killed_period["state"].with_name("report.html")
    table = subprocess.run([*command, "--html", str(html)], cwd=PROJECT, env=env, capture_output=True, text=True,
                           timeout=120, check=True).stdout
    # Below the period's spend, wrapped within 100 columns.
    assert f"({killed['unattributed']:g} by runs" in table
    assert "never closed)" in table
    assert f"{killed['unattributed']:g} by runs that never closed</span>" in html.read_text(encoding="utf-8")


def test_a_slow_run_killed_keeps_what_it_saw_before_the_last_commit_interval(tmp_path: Path) -> None:
    """A crawl at ``scrapy startproject``'s pace makes about a visit a second, so 50 observations (one batch)
    take most of a minute: a kill lost them all, and the next run paid for those pages again. An observation
    now commits the batch once ``COSTSCHED_COMMIT_INTERVAL`` has passed since the last commit."""
    from demo_site.catalog import Catalog

    catalog = Catalog.generate(products=60, categories=2, seed=5, horizon_days=10, new_per_day=0)
    shop = CountingSite(catalog, tmp_path / "clock")
    work = tmp_path / "work"
    try:
        shop.site.set_time(shop.site.day(1))
        # robots.txt, the start pages and about 20 products: some 5 s of crawling
        killed, log = run_and_kill(shop, work, "slow", 25, 0.0, budget=1000, settings={
            "DOWNLOAD_DELAY": 0.2, "RANDOMIZE_DOWNLOAD_DELAY": False, "COSTSCHED_COMMIT_INTERVAL": "1s"})
        assert killed, "the crawl ended before it was killed: " + log[-3000:]
    finally:
        shop.close()
    copy = copy_state(work / "state.sqlite", tmp_path / "after-kill")
    page_keys(copy)  # opened as the next crawl opens it: a hot journal is rolled back
    visited = [page for page in read_state(copy)["pages"].values() if page["visits"]]
    # With a batch of 50 and no time bound nothing was committed; a second's worth at most is lost now.
    assert len(visited) >= 10, f"{len(visited)} of the about 24 pages visited survived the kill"


def test_a_run_stopped_by_ctrl_c_closes_the_state_and_books_what_it_sent(tmp_path: Path) -> None:
    """Found in a trial: a newcomer stops a run with Ctrl-C. Scrapy closes the spider as at its end (reason
    ``shutdown``): the state is closed, the next run continues it without the check a kill calls for, and the
    period's budget holds what the stopped run sent, not what it had drawn ahead."""
    from demo_site.catalog import Catalog

    catalog = Catalog.generate(products=60, categories=2, seed=5, horizon_days=10, new_per_day=0)
    shop = CountingSite(catalog, tmp_path / "clock")
    work = tmp_path / "work"
    try:
        shop.site.set_time(shop.site.day(1))
        stopped, log = run_and_kill(shop, work, "stopped", 10, 0.0, budget=40, sig=signal.SIGINT, settings={
            "DOWNLOAD_DELAY": 0.2, "RANDOMIZE_DOWNLOAD_DELAY": False})
        assert stopped, "the crawl ended before Ctrl-C: " + log[-3000:]
        received = shop.received
        later = crawl(shop.site, work, budget=40, tag="later")
    finally:
        shop.close()
    assert "Received SIGINT, shutting down gracefully" in log
    assert "costsched: run finished (shutdown): " in log
    assert later.returncode == 0, later.log[-3000:]
    assert "was not closed by the run that last wrote it" not in later.log
    assert later.stats["costsched/period_spent_at_start"] == received < 40
    assert f"{40 - received} requests left in this period" in later.log


def test_a_run_stopped_by_a_second_ctrl_c_keeps_what_it_observed(tmp_path: Path) -> None:
    """Found in a blog's trial: a second Ctrl-C ("forcing unclean shutdown") stops Scrapy's loop at once, while the
    spider is still closing; what the run had observed since its last commit was lost, as after a kill (here all
    19 pages, none of them recorded as visited). The process now commits it as it exits."""
    from demo_site.catalog import Catalog

    catalog = Catalog.generate(products=60, categories=2, seed=5, horizon_days=10, new_per_day=0)
    shop = CountingSite(catalog, tmp_path / "clock")
    work = tmp_path / "work"
    try:
        shop.site.set_time(shop.site.day(1))
        shop.stall(after=20, seconds=5.0)  # the answers in flight hold the graceful stop the first Ctrl-C asks for
        stopped, log = run_and_kill(shop, work, "stopped", 20, 0.5, budget=40, sig=signal.SIGINT, again_after=0.5,
                                    settings={"COSTSCHED_COMMIT_EVERY": 1000, "COSTSCHED_COMMIT_INTERVAL": "1h"})
        assert stopped, "the crawl ended before Ctrl-C: " + log[-3000:]
        observed = {key for key, page in read_state(work / "state.sqlite")["pages"].items() if page["visits"]}
        shop.stall(after=10**6, seconds=0.0)
        later = crawl(shop.site, work, budget=40, tag="later")
    finally:
        shop.close()
    assert "Received SIGINT twice, forcing unclean shutdown" in log
    assert "costsched: run finished" not in log  # the spider never closed: the commit is the exit's
    assert len(observed) >= 20 - 1 - CONCURRENT  # the answers before the stall, less robots.txt and those in parse
    assert "was not closed by the run that last wrote it" in later.log
    assert later.returncode == 0, later.log[-3000:]
