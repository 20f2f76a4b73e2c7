"""A loopback news site whose content follows a simulated clock, and real crawls of ``tests/news_project``.

Issue 8's regressions ("hold up in real projects") crawl an ordinary Scrapy project against a site
shaped like a news site: the front page links to sections, each section lists its newest articles,
and an article is linked from its section only while it is on that list, so once it scrolls off only
a stored request template reaches it. The site is a pure function of its seed and of the time in a
clock file, which the crawler reads too (``news.clock.now`` reads the file named by
``DEMO_CLOCK_FILE``, as ``demo_site.clock.now`` does), so tests know the ground truth at any instant.
"""

from __future__ import annotations

import datetime
import hashlib
import html
import json
import math
import os
import random
import re
import subprocess
import sys
import threading
from bisect import bisect_right
from dataclasses import dataclass
from email.utils import formatdate, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from tests.helpers import PROJECT, ROOT, CrawlResult, crawl_options

if str(PROJECT) not in sys.path:
    sys.path.insert(0, str(PROJECT))

from demo_site.catalog import DAY, EPOCH0
from demo_site.clock import set_clock

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence
    from pathlib import Path
    from types import TracebackType

    from typing_extensions import Self

NEWS_PROJECT = ROOT / "tests" / "news_project"
ROBOTS_TXT = "User-agent: *\nDisallow: /private/\n"
SECTION_NAMES = ("World", "Business", "Science", "Sport", "Culture", "Travel", "Health", "Tech")
#: (share, lowest, highest) updates per day of an article: most rarely, some weekly, a few daily.
UPDATE_RATES = ((0.7, 1 / 120, 1 / 20), (0.2, 1 / 7, 1 / 2), (0.1, 1.0, 3.0))
_WORDS = ("market", "council", "river", "storm", "league", "museum", "vaccine", "rocket", "harbour", "budget",
          "festival", "court", "election", "glacier", "startup", "orchestra", "bridge", "drought", "treaty", "robot")
_ROUTE = re.compile(r"/(section|article|moved|private|story)/(\d+)")


def _section_name(s: int) -> str:
    return SECTION_NAMES[s % len(SECTION_NAMES)]


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat()


def _hash_int(*parts: object) -> int:
    """A stable integer from *parts* (``hash()`` is salted per process)."""
    return int.from_bytes(hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest(), "big")


@dataclass(frozen=True)
class Article:
    """One article: when it appeared, in which section, and when it was updated (whole epoch seconds)."""

    id: int
    section: int
    published: float
    rate: float
    """Updates per day."""
    updates: tuple[float, ...]

    @property
    def path(self) -> str:
        return f"/article/{self.id}"

    def version_at(self, t: float) -> int:
        """Updates made by *t* (0: as published)."""
        return bisect_right(self.updates, t)

    def updated_at(self, t: float) -> float:
        """Time of the version live at *t*: what the page's ``updated`` field and Last-Modified say."""
        v = self.version_at(t)
        return self.updates[v - 1] if v else self.published


@dataclass
class _Page:
    status: int
    body: str = ""
    content_type: str = "text/html; charset=utf-8"
    last_modified: float | None = None
    location: str | None = None


def _html(title: str, body: str) -> str:
    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title></head>\n'
            f"<body>\n{body}\n</body></html>\n")


class NewsSite:
    """The site on 127.0.0.1 (and 127.0.0.2, or ``localhost`` where 127.0.0.2 is unusable, as the offsite host).

    * ``/``: the front page, linking to every section and to an offsite page on the other host.
    * ``/section/<s>``: the newest *per_page* articles of section *s*, newest first, with a "last
      updated" time (the newest article's) that changes whenever the list does. Articles appear at
      *section_rates* per day (default 2, and 6 in every fourth section) at random times, from
      *backlog_days* before day 0 on. Sections in *private_sections* also link to ``/private/<s>``.
    * ``/article/<id>``: title, ``updated`` time and body; updates follow a Poisson process at the
      article's own rate, drawn from *update_rates* ((share, lowest, highest) a day: :data:`UPDATE_RATES`). 404 before it appears; ids in *flaky_gone* answer 404
      on some days (:meth:`gone_at`) and 200 on others; *broken* answers 500 always.
    * ``/sitemap.xml`` (with *sitemap*, which also names it in ``/robots.txt``): every article that
      answers 200, with its ``lastmod``.
    * ``/moved/<id>``: 301 to ``/article/<id>``. ``/private/<n>``: disallowed by ``/robots.txt``.
    * ``/story/<id>``: article *id* once it has moved (from the time *moves* gives for it on): its section
      then links there, and ``/article/<id>`` answers 301 to it.
    * ``/offsite``: a page, linked from the front page on the other host name.
    * ``/featured`` (with *featured*, which the front page then links): 302 to the oldest article section 0 lists;
      and a login wall: ``/members/<n>`` (n = 1 to 3, linked the same way) answer 302 to ``/login``.

    Article and section pages send ``Last-Modified`` and honour ``If-Modified-Since``; ``Date`` is the
    simulated time. Requests are counted per path (:attr:`hits`, :attr:`offsite_hits`) and in total.

    Each request reads the time from *clock_file* (:meth:`set_time`, :meth:`set_day`; :func:`run_news`
    hands the same file to the crawler). The ground truth at any time: :meth:`articles_at`,
    :meth:`listing_at`, :meth:`item_at`, :meth:`is_fresh`, :meth:`gone_at`, and each
    :class:`Article`'s appearance and versions.
    """

    def __init__(
        self,
        clock_file: Path,
        *,
        sections: int = 4,
        per_page: int = 10,
        section_rates: Sequence[float] | None = None,
        seed: int = 1,
        horizon_days: float = 30.0,
        backlog_days: float = 7.0,
        private_sections: Collection[int] = (0,),
        flaky_gone: Collection[int] = (),
        broken: int | None = None,
        sitemap: bool = False,
        start: float = EPOCH0,
        moves: dict[int, float] | None = None,
        featured: bool = False,
        update_rates: Sequence[tuple[float, float, float]] = UPDATE_RATES,
    ) -> None:
        rates = list(section_rates) if section_rates is not None else [
            6.0 if s % 4 == 3 else 2.0 for s in range(sections)]
        if len(rates) != sections:
            raise ValueError("section_rates needs one rate per section")
        self.clock_file = clock_file
        self.sections = sections
        self.per_page = per_page
        self.section_rates = tuple(rates)
        self.seed = seed
        self.start = start
        self.end = start + horizon_days * DAY
        self.private_sections = frozenset(private_sections)
        self.flaky_gone = frozenset(flaky_gone)
        self.broken = broken
        self.sitemap = sitemap
        self.moves = dict(moves or {})
        self.featured = featured
        self.update_rates = tuple(update_rates)
        self.articles = self._generate(start - backlog_days * DAY)
        self._by_section = [[a for a in self.articles if a.section == s] for s in range(sections)]
        self._published = [[a.published for a in listing] for listing in self._by_section]
        self.hits: dict[str, int] = {}
        self.offsite_hits: dict[str, int] = {}
        self.total = 0
        self._lock = threading.Lock()
        self.set_time(self.day(0))
        self._servers = [ThreadingHTTPServer(("127.0.0.1", 0), self._handler())]
        self.port = self._servers[0].server_address[1]
        try:
            self._servers.append(ThreadingHTTPServer(("127.0.0.2", self.port), self._handler()))
            self.offsite_host = "127.0.0.2"
        except OSError:
            self.offsite_host = "localhost"
        for server in self._servers:
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, args=(0.05,), name="news-site", daemon=True).start()

    # -- content, as a function of time --------------------------------------

    def _generate(self, begin: float) -> tuple[Article, ...]:
        arrivals: list[tuple[float, int]] = []
        for s, rate in enumerate(self.section_rates):
            rng = random.Random(f"news/{self.seed}/section/{s}")
            t = begin
            while rate > 0.0:
                t += rng.expovariate(rate) * DAY
                if t > self.end:
                    break
                arrivals.append((float(round(t)), s))
        arrivals.sort()
        articles = []
        for aid, (published, section) in enumerate(arrivals, start=1):
            rng = random.Random(f"news/{self.seed}/article/{aid}")
            low, high = rng.choices([(lo, hi) for _, lo, hi in self.update_rates], [s for s, _, _ in self.update_rates])[0]
            rate = math.exp(rng.uniform(math.log(low), math.log(high)))
            updates: list[float] = []
            t = published
            while True:
                t = max(t + rng.expovariate(rate) * DAY, (updates[-1] if updates else published) + 1.0)
                if t > self.end:
                    break
                updates.append(float(round(t)))
            articles.append(Article(aid, section, published, rate, tuple(updates)))
        return tuple(articles)

    def article(self, aid: int) -> Article:
        """The article with id *aid* (ids count from 1 in order of appearance)."""
        if not 1 <= aid <= len(self.articles):
            raise KeyError(aid)
        return self.articles[aid - 1]

    def articles_at(self, t: float) -> list[Article]:
        """Every article that has appeared by *t*, oldest first."""
        return [a for a in self.articles if a.published <= t]

    def listing_at(self, section: int, t: float) -> list[Article]:
        """What ``/section/<section>`` lists at *t*: its newest *per_page* articles, newest first."""
        n = bisect_right(self._published[section], t)
        return self._by_section[section][max(n - self.per_page, 0) : n][::-1]

    def gone_at(self, aid: int, t: float) -> bool:
        """Whether article *aid* answers 404 at *t* although it has appeared (only ids in :attr:`flaky_gone`)."""
        day = math.floor((t - self.start) / DAY)
        return aid in self.flaky_gone and _hash_int(self.seed, "gone", aid, day) % 2 == 1

    def path_at(self, article: Article, t: float) -> str:
        """Where *article* lives at *t*: ``/story/<id>`` once it has moved."""
        moved = self.moves.get(article.id)
        return f"/story/{article.id}" if moved is not None and moved <= t else article.path

    def title(self, article: Article) -> str:
        rng = random.Random(f"news/{self.seed}/title/{article.id}")
        words = rng.sample(_WORDS, 3)
        return f"{_section_name(article.section)} story {article.id}: {' '.join(words)}"

    def body(self, article: Article, version: int) -> str:
        rng = random.Random(f"news/{self.seed}/body/{article.id}/{version}")
        return f"Version {version} of story {article.id}. " + " ".join(rng.choices(_WORDS, k=12)) + "."

    def item_at(self, aid: int, t: float) -> dict[str, Any] | None:
        """The item the ``news`` spider makes of article *aid* at *t* (after its cleaning pipeline),
        or None while the page does not answer 200."""
        a = self.article(aid)
        if a.published > t or aid == self.broken or self.gone_at(aid, t):
            return None
        return {"url": self.url + self.path_at(a, t), "id": aid, "section": a.section, "title": self.title(a),
                "updated": _iso(a.updated_at(t)), "body": self.body(a, a.version_at(t))}

    def is_fresh(self, item: dict[str, Any], t: float) -> bool:
        """Whether a crawled *item* still matches the live article at *t*."""
        live = self.item_at(int(item["id"]), t)
        return live is not None and live["updated"] == item["updated"] and live["body"] == item["body"]

    def render(self, path: str, t: float) -> _Page:
        """The answer to a GET of *path* at *t* (pure; the handler adds HTTP plumbing)."""
        path = path.split("?", 1)[0]
        if path == "/robots.txt":
            sitemap = f"Sitemap: {self.url}/sitemap.xml\n" if self.sitemap else ""
            return _Page(200, ROBOTS_TXT + sitemap, "text/plain; charset=utf-8")
        if path == "/sitemap.xml" and self.sitemap:
            rows = "".join(f"<url><loc>{self.url}{self.path_at(a, t)}</loc>"
                           f"<lastmod>{_iso(a.updated_at(t))}</lastmod></url>"
                           for a in self.articles_at(t) if a.id != self.broken and not self.gone_at(a.id, t))
            return _Page(200, '<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns='
                         f'"http://www.sitemaps.org/schemas/sitemap/0.9">{rows}</urlset>', "application/xml")
        if path in ("/", "/index.html"):
            links = "\n".join(f'<li><a class="section" href="/section/{s}">{_section_name(s)}</a></li>'
                              for s in range(self.sections))
            offsite = f'<p><a class="offsite" href="{self.offsite_url}/offsite">Partner site</a></p>'
            featured = "".join(f'<p><a class="featured" href="{path}">{path}</a></p>' for path in (
                "/featured", "/members/1", "/members/2", "/members/3")) if self.featured else ""
            body = f'<h1>Loopback News</h1>\n<ul class="sections">\n{links}\n</ul>\n{offsite}{featured}'
            return _Page(200, _html("Loopback News", body))
        if path == "/featured" and self.featured:
            return _Page(302, location=self.path_at(self.listing_at(0, t)[-1], t))
        if path in ("/members/1", "/members/2", "/members/3") and self.featured:
            return _Page(302, location="/login")
        if path == "/login" and self.featured:
            return _Page(200, _html("Log in", "<h1>Log in</h1>"))
        if path == "/offsite":
            return _Page(200, _article_html(0, -1, "Partner story", _iso(self.start), "Hosted elsewhere."))
        m = _ROUTE.fullmatch(path)
        if m is None:
            return _Page(404, _html("Not found", "<h1>Not found</h1>"))
        kind, number = m.group(1), int(m.group(2))
        if kind == "section" and number < self.sections:
            return self._section(number, t)
        if kind == "private":
            return _Page(200, _article_html(0, number, "Staff only", _iso(self.start), "Not for robots."))
        if kind in ("article", "moved", "story") and 1 <= number <= len(self.articles):
            a = self.article(number)
            if kind == "moved" or (kind == "article" and self.path_at(a, t) != a.path):
                return _Page(301, location=self.path_at(a, t))
            if kind == "story" and self.path_at(a, t) == a.path:
                return _Page(404, _html("Not found", "<h1>Not found</h1>"))
            if number == self.broken:
                return _Page(500, _html("Error", "<h1>Server error</h1>"))
            if a.published <= t and not self.gone_at(number, t):
                updated = a.updated_at(t)
                body = _article_html(number, a.section, self.title(a), _iso(updated), self.body(a, a.version_at(t)))
                return _Page(200, body, last_modified=updated)
        return _Page(404, _html("Not found", "<h1>Not found</h1>"))

    def _section(self, s: int, t: float) -> _Page:
        listing = self.listing_at(s, t)
        updated = listing[0].published if listing else self.start
        rows = "\n".join(f'<li><a class="article" href="{self.path_at(a, t)}">  {html.escape(self.title(a))}  </a></li>'
                         for a in listing)
        private = ""
        if s in self.private_sections:
            private = f'<p><a class="private" href="/private/{s}">Staff only</a></p>\n'
        name = _section_name(s)
        body = (f'<h1 class="section">{name}</h1>\n<p>Last updated: <time class="updated">{_iso(updated)}</time></p>\n'
                f'<ul class="articles">\n{rows}\n</ul>\n{private}<p><a class="home" href="/">Front page</a></p>')
        return _Page(200, _html(name, body), last_modified=updated)

    # -- time -------------------------------------------------------------------

    def now(self) -> float:
        """The simulated time: the clock file's epoch seconds."""
        return float(self.clock_file.read_text(encoding="ascii"))

    def set_time(self, t: float) -> None:
        set_clock(self.clock_file, t)

    def day(self, d: float, hour: float = 6.0) -> float:
        """Epoch seconds of *hour* o'clock on simulated day *d* (day 0 starts at *start*)."""
        return self.start + d * DAY + hour * 3600.0

    def set_day(self, d: float, hour: float = 6.0) -> None:
        self.set_time(self.day(d, hour))

    # -- serving and counting --------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def offsite_url(self) -> str:
        return f"http://{self.offsite_host}:{self.port}"

    def requests(self, prefix: str = "/") -> int:
        """Requests received so far for paths starting with *prefix* (this host only)."""
        with self._lock:
            return sum(n for path, n in self.hits.items() if path.startswith(prefix))

    def reset_counts(self) -> None:
        with self._lock:
            self.hits.clear()
            self.offsite_hits.clear()
            self.total = 0

    def _count(self, host: str, path: str) -> None:
        with self._lock:
            hits = self.offsite_hits if host == self.offsite_host else self.hits
            hits[path] = hits.get(path, 0) + 1
            self.total += 1

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as Scrapy expects of a real server

            def do_GET(self) -> None:
                host = (self.headers.get("Host") or "").rsplit(":", 1)[0]
                site._count(host, self.path)
                page = site.render(self.path, site.now())
                status = page.status
                since = self.headers.get("If-Modified-Since")
                if status == 200 and since and page.last_modified is not None:
                    try:
                        if page.last_modified <= parsedate_to_datetime(since).timestamp():
                            status = 304
                    except (TypeError, ValueError, IndexError, OverflowError):
                        pass
                body = b"" if status == 304 else page.body.encode()
                self.send_response(status)
                if page.location is not None:
                    self.send_header("Location", page.location)
                if page.last_modified is not None:
                    self.send_header("Last-Modified", formatdate(page.last_modified, usegmt=True))
                if body:
                    self.send_header("Content-Type", page.content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def date_time_string(self, timestamp: float | None = None) -> str:
                return formatdate(site.now() if timestamp is None else timestamp, usegmt=True)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib signature)
                pass

        return Handler

    def close(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _article_html(aid: int, section: int, title: str, updated: str, body: str) -> str:
    paragraphs = "\n".join(f"<p>{html.escape(sentence)}.</p>" for sentence in body.rstrip(".").split(". "))
    return _html(title, (
        f'<article data-id="{aid}" data-section="{section}">\n<h1 class="title">\n  {html.escape(title)}\n</h1>\n'
        f'<p class="meta">Updated: <time class="updated">{updated}</time></p>\n'
        f'<div class="body">\n{paragraphs}\n</div>\n'
        f'<p><a class="section" href="/section/{max(section, 0)}">More from this section</a></p>\n</article>'))


def news_command(
    site: NewsSite, workdir: Path, *, budget: float | None = None, settings: dict[str, Any] | None = None,
    spider_args: dict[str, Any] | None = None, tag: str = "run", spider: str = "news",
) -> tuple[list[str], dict[str, str], Path, Path]:
    """The ``scrapy crawl <spider>`` command line, environment, stats file and items file of one run."""
    workdir.mkdir(parents=True, exist_ok=True)
    stats_file, items_file = workdir / f"{tag}.stats.json", workdir / f"{tag}.items.jsonl"
    for stale in (stats_file, items_file):
        stale.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "scrapy", "crawl", spider, "-a", f"site={site.url}",
           "-s", f"COSTSCHED_STATE={workdir / 'state.sqlite'}", "-s", f"DEMO_STATS_FILE={stats_file}",
           "-O", f"{items_file}:jsonlines", *crawl_options(budget, settings, spider_args)]
    return cmd, news_env(site), stats_file, items_file


def news_env(site: NewsSite) -> dict[str, str]:
    """The environment a ``scrapy`` command runs in within the news project, at *site*'s clock."""
    env = {k: v for k, v in os.environ.items() if k != "SCRAPY_SETTINGS_MODULE"}
    env["DEMO_CLOCK_FILE"] = str(site.clock_file)
    # The demo project lends the news project its stats-file extension.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), str(PROJECT), os.environ.get("PYTHONPATH", "")) if p)
    return env


def news_report(site: NewsSite, workdir: Path, *, budget: float, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """``scrapy costsched-report --json`` on ``workdir/state.sqlite`` at *site*'s current time, for a budget of
    *budget* (what the next ``run_news`` with it, and *settings*, would plan)."""
    cmd = [sys.executable, "-m", "scrapy", "costsched-report", "--spider", "news", "--json",
           "-s", f"COSTSCHED_STATE={workdir / 'state.sqlite'}", *crawl_options(budget, settings, None)]
    proc = subprocess.run(cmd, cwd=NEWS_PROJECT, env=news_env(site), capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


def run_news(site: NewsSite, workdir: Path, *, budget: float | None = None, settings: dict[str, Any] | None = None,
             spider_args: dict[str, Any] | None = None, tag: str = "run", timeout: float = 180,
             spider: str = "news") -> CrawlResult:
    """One real ``scrapy crawl news`` (or another of the project's spiders) in ``tests/news_project``
    against *site* at its current time.

    The state is ``workdir/state.sqlite`` (shared by every run in *workdir*), items go to
    ``workdir/<tag>.items.jsonl`` and stats to ``workdir/<tag>.stats.json``. Nothing the project
    leaves on is switched off: *settings* only add to it.
    """
    cmd, env, stats_file, items_file = news_command(site, workdir, budget=budget, settings=settings,
                                                    spider_args=spider_args, tag=tag, spider=spider)
    proc = subprocess.run(cmd, cwd=NEWS_PROJECT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    stats = json.loads(stats_file.read_text()) if stats_file.exists() else {}
    items = [json.loads(line) for line in items_file.read_text().splitlines()] if items_file.exists() else []
    return CrawlResult(proc.returncode, stats, items, proc.stderr, cmd)


def costsched_state(site: NewsSite, *args: str, ok: bool = True, stdin: str | None = None,
                    ) -> subprocess.CompletedProcess[str]:
    """``scrapy costsched-state ARGS --spider news`` in the news project, on the site's clock."""
    proc = subprocess.run([sys.executable, "-m", "scrapy", "costsched-state", *args, "--spider", "news"],
                          cwd=NEWS_PROJECT, env=news_env(site), input=stdin, capture_output=True, text=True, timeout=120,
                          check=False)
    if ok:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc
