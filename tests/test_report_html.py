"""The HTML report (``scrapy costsched-report --html``) of real crawls, opened in headless Chromium.

The crawled markup comes from :class:`MarkupNamesSpider`, defined here and run with ``scrapy runspider``
on this file: its pages' URLs carry a script and its page types are HTML and SVG.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from typing import TYPE_CHECKING, Any

import markupsafe
import pytest
import scrapy
from parsel import Selector
from PIL import Image
from scrapy.settings import Settings

from scrapy_costsched.commands import Target, reading_tracker
from scrapy_costsched.report import Dataset, Figures, PageRow, PlannedPage, Report, build_report
from scrapy_costsched.report.html import (
    BUDGET,
    LABEL_CHARS,
    NO_CHANGE,
    PER_CHANGE,
    SPENT,
    ReportDependencyError,
    human_amount,
    render_html,
)
from scrapy_costsched.report.terminal import render_terminal
from scrapy_costsched.settings import Config
from scrapy_costsched.storage import storage_from_uri
from tests import chromium
from tests.chromium import dump_dom, screenshot
from tests.helpers import PROJECT, ROOT, DemoSite, crawl, crawl_options, start_site
from tests.mockserver import EdgeSite

from demo_site.clock import set_clock  # isort: skip  (example_project is on the path via tests.helpers)

if TYPE_CHECKING:
    from pathlib import Path

SHADOW_DAYS = 2
DAYS = 6
BUDGET_PER_DAY = 25
CHARTS = ("spend", "cost_per_change", "rates", "no_change")
#: What a crawled URL or page type could try: run a script, close the table, close a comment or CDATA.
PWN = "document.body.setAttribute('data-pwned','1')"
SCRIPT_QUERY = f"q=<script>document.title='pwned';{PWN}</script>"
MARKUP_TYPES = (
    f'<img src=x onerror="{PWN}">',
    "</td></tr></table><script>document.title='pwned'</script>",
    f"]]>--><svg onload=\"{PWN}\">$x$",
)


def report_of(state: Path, now: float) -> Report:
    settings = Settings()
    settings.set("COSTSCHED_CLOCK", lambda: now)
    target = Target(str(state), Config.from_settings(settings), settings)
    store = storage_from_uri(target.uri, read_only=True)
    store.open()
    try:
        return build_report(reading_tracker(target, store), target.uri)
    finally:
        store.close()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The demo shop on two hosts crawled once a day: two shadow days, then a budget of 25 requests."""
    tmp = tmp_path_factory.mktemp("demo")
    mp = pytest.MonkeyPatch()
    mp.setenv("DEMO_CLOCK_FILE", str(tmp / "clock"))
    site, server = start_site(tmp, products=40, categories=2, seed=3, horizon_days=DAYS + 2,
                              hosts=("honour", "ignore"))
    state = tmp / "state.sqlite"
    stats = []
    try:
        for day in range(DAYS):
            site.set_time(site.day(day))
            result = crawl(site, tmp / f"day{day}", state=state, budget=None if day < SHADOW_DAYS else BUDGET_PER_DAY)
            assert result.returncode == 0, result.log[-3000:]
            stats.append(result.stats)
    finally:
        server.close()
        mp.undo()
    report = report_of(state, site.day(DAYS))
    page = tmp / "report.html"
    page.write_text(render_html(report), encoding="utf-8")
    return {"site": site, "state": state, "stats": stats, "report": report, "page": page, "tmp": tmp}


class MarkupNamesSpider(scrapy.Spider):
    """Pages whose URL carries a script and whose page types are markup (``scrapy runspider`` this file)."""

    name = "markup_names"
    custom_settings = {
        "ADDONS": {"scrapy_costsched.Addon": 0},
        "ROBOTSTXT_OBEY": True,
        "TELNETCONSOLE_ENABLED": False,
        "COSTSCHED_CLOCK": "demo_site.clock.now",
        "LOG_LEVEL": "INFO",
    }

    def __init__(self, site: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.site = site

    async def start(self) -> Any:
        for n, page_type in enumerate(MARKUP_TYPES):
            for k in range(2):
                yield scrapy.Request(f"{self.site}/page/{2 * n + k}?{SCRIPT_QUERY}",
                                     meta={"costsched_page_type": page_type})

    def parse(self, response: Any) -> Any:
        yield {"url": response.url, "title": response.css("h1::text").get()}


@pytest.fixture(scope="module")
def markup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Three daily crawls by :class:`MarkupNamesSpider`: every page new, then changed, then unchanged (on a
    budget, which plans the next run)."""
    tmp = tmp_path_factory.mktemp("markup")
    site = EdgeSite()
    site.validators = True
    state = tmp / "state.sqlite"
    env = dict(os.environ, DEMO_CLOCK_FILE=str(tmp / "clock"), PYTHONPATH=os.pathsep.join([str(PROJECT), str(ROOT)]))
    try:
        for day, (version, budget) in enumerate(((0, None), (1, None), (1, 10))):
            site.version = version
            set_clock(tmp / "clock", DemoSite.day(day))
            proc = subprocess.run(
                [sys.executable, "-m", "scrapy", "runspider", __file__, "-a", f"site={site.url}",
                 "-s", f"COSTSCHED_STATE={state}", *crawl_options(budget, None, None)],
                cwd=tmp, env=env, capture_output=True, text=True, timeout=120, check=False)
            assert proc.returncode == 0, proc.stderr[-3000:]
            assert "ERROR" not in proc.stderr, proc.stderr[-3000:]
    finally:
        site.close()
    report = report_of(state, DemoSite.day(3))
    page = tmp / "report.html"
    text = render_html(report)
    page.write_text(text, encoding="utf-8")
    return {"report": report, "page": page, "html": text, "state": state}


def chart_svgs(dom: Selector) -> dict[str, bytes]:
    svgs = {}
    for key in CHARTS:
        src = dom.css(f"img#chart-{key}::attr(src)").get()
        assert src is not None, f"no {key} chart"
        prefix, _, data = src.partition(",")
        assert prefix == "data:image/svg+xml;base64", prefix
        svgs[key] = base64.b64decode(data)
    return svgs


def cell_texts(dom: Selector, table: str, column: int) -> list[str]:
    return [" ".join(" ".join(row.css(f"td:nth-child({column}) ::text").getall()).split())
            for row in dom.css(f"table#{table} tbody tr")]


def test_chromium_shows_the_crawls_figures(demo: dict[str, Any]) -> None:
    dom = Selector(text=dump_dom(demo["page"]))
    stats = demo["stats"]
    assert len(dom.css("table#periods tbody tr")) == DAYS
    assert cell_texts(dom, "periods", 2) == ["shadow"] * SHADOW_DAYS + [str(BUDGET_PER_DAY)] * (DAYS - SHADOW_DAYS)
    assert cell_texts(dom, "periods", 3) == [human_amount(s["costsched/spent"], "requests") for s in stats]
    # Each day is one run and one period: the run's cost per change is its period's ("-": nothing changed).
    assert cell_texts(dom, "periods", 8) == [human_amount(s.get("costsched/cost_per_change"), "requests")
                                             for s in stats]
    assert cell_texts(dom, "periods", 8)[0] == "-"
    assert dom.css("#total-spent::text").get() == human_amount(sum(s["costsched/spent"] for s in stats), "requests")
    assert dom.css("#total-changes::text").get() == str(sum(s.get("costsched/changed", 0) for s in stats))
    assert cell_texts(dom, "hosts", 1) == ["127.0.0.1", "127.0.0.2"]
    assert cell_texts(dom, "host-signals", 4) == ["trusted", "ignored"]  # the second host ignores If-None-Match
    assert {"listing", "product"} <= set(cell_texts(dom, "page-types", 1))
    assert len(dom.css("table#next-plan tbody tr")) == len(demo["report"].next_plan) > 0
    assert len(dom.css("table#shadow-savings tbody tr")) == 3
    for key, svg in chart_svgs(dom).items():
        root = ET.fromstring(svg)
        assert root.tag == "{http://www.w3.org/2000/svg}svg", key
        assert len(root.findall(".//{http://www.w3.org/2000/svg}path")) > 20, key


def colours(image: Image.Image) -> Counter[Any]:
    """How many pixels of each colour (an RGB tuple) an RGB image has."""
    return Counter({colour: n for n, colour in image.getcolors(image.width * image.height) or []})


def colours_near(image: Image.Image, hex_colour: str, tolerance: int = 24) -> int:
    target = tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return sum(n for colour, n in colours(image).items()
               if all(abs(c - t) <= tolerance for c, t in zip(colour, target, strict=True)))


def test_chromium_draws_every_chart(demo: dict[str, Any], tmp_path: Path) -> None:
    """Each chart as Chromium paints it, in its own box of a page: drawn, and in its own colours."""
    svgs = chart_svgs(Selector(text=demo["page"].read_text(encoding="utf-8")))
    boxes = "".join(
        f'<img src="data:image/svg+xml;base64,{base64.b64encode(svg).decode()}" '
        f'style="position:absolute; left:{640 * (i % 2)}px; top:{480 * (i // 2)}px; width:640px; height:480px; '
        f'object-fit:contain">'
        for i, svg in enumerate(svgs.values()))
    page = tmp_path / "charts.html"
    page.write_text(f"<!DOCTYPE html><html><body style='margin:0; background:#fff'>{boxes}</body></html>")
    shot = Image.open(screenshot(page, tmp_path / "charts.png", 1280, 960)).convert("RGB")
    expected = {"spend": (SPENT, BUDGET), "cost_per_change": (PER_CHANGE,), "rates": (BUDGET,),
                "no_change": (NO_CHANGE,)}
    for i, key in enumerate(svgs):
        box = shot.crop((640 * (i % 2), 480 * (i // 2), 640 * (i % 2) + 640, 480 * (i // 2) + 480))
        pixels = colours(box)
        drawn = box.width * box.height - pixels[(255, 255, 255)]
        assert drawn > 0.02 * box.width * box.height, key
        assert len(pixels) > 50, key
        for colour in expected[key]:
            assert colours_near(box, colour) > 200, (key, colour)


def test_chromium_screenshot_of_the_page_is_not_blank(demo: dict[str, Any], tmp_path: Path) -> None:
    shot = Image.open(screenshot(demo["page"], tmp_path / "report.png")).convert("RGB")
    top = shot.crop((0, 0, shot.width, 1000))
    pixels = colours(top)
    assert len(pixels) > 500
    assert top.width * top.height - pixels[(255, 255, 255)] > 0.15 * top.width * top.height
    assert colours_near(top, SPENT) > 1000  # the spend chart sits at the top


def test_crawled_markup_is_shown_as_text_and_never_runs(markup: dict[str, Any]) -> None:
    text = markup["html"]
    for page_type in MARKUP_TYPES:
        assert page_type not in text
        assert str(markupsafe.escape(page_type)) in text
    stored = [page.url for page in markup["report"].wasteful_pages]
    assert stored, "the third crawl found unchanged pages"
    assert all("?q=%3Cscript%3Edocument.title=%27pwned%27" in url for url in stored)  # as Scrapy requested it
    dom = Selector(text=dump_dom(markup["page"]))
    assert dom.xpath("//@data-pwned") == []
    assert dom.css("title::text").get() == f"costsched report: {markup['state']}"
    assert dom.css("script, body svg, img[src=x]") == []
    assert dom.xpath("//*[@onerror or @onload]") == []
    assert set(cell_texts(dom, "page-types", 1)) >= set(MARKUP_TYPES)
    assert set(cell_texts(dom, "wasteful-pages", 1)) == set(stored)
    assert set(cell_texts(dom, "next-plan", 2)) <= set(stored)


def test_chart_text_is_escaped(markup: dict[str, Any]) -> None:
    """matplotlib's SVG writer escapes the page types it labels the rates chart with (cut short, in
    comments, as the glyphs are paths); the charts parse as XML, with no script, no foreign content, no
    handler."""
    svgs = chart_svgs(Selector(text=markup["html"]))
    for key, svg in svgs.items():
        root = ET.fromstring(svg)
        for element in root.iter():
            assert not element.tag.endswith(("script", "foreignObject")), key
            assert not [name for name in element.attrib if name.lower().startswith("on")], key
    rates = svgs["rates"].decode()
    for page_type in MARKUP_TYPES:
        label = page_type[:LABEL_CHARS - 1] + "…"
        assert label not in rates
        assert f'<!-- {label.replace("<", "&lt;").replace(">", "&gt;").replace("--", "- -")} -->' in rates


def test_command_writes_the_page_and_nothing_in_home(demo: dict[str, Any], tmp_path: Path) -> None:
    """``scrapy costsched-report --html`` with an empty home: matplotlib lists its fonts in a scratch
    directory, removed at exit, not in ``~/.cache``."""
    home, scratch, out = tmp_path / "home", tmp_path / "scratch", tmp_path / "out.html"
    home.mkdir()
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "MPL"))}
    env.update(HOME=str(home), TMPDIR=str(scratch), DEMO_CLOCK_FILE=str(demo["tmp"] / "clock"),
               PYTHONPATH=os.pathsep.join([str(PROJECT), str(ROOT)]))
    proc = subprocess.run([sys.executable, "-m", "scrapy", "costsched-report", "--spider", "shop",
                           "--state", str(demo["state"]), "--html", str(out)],
                          cwd=PROJECT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"wrote the HTML report to {out}" in proc.stderr
    dom = Selector(text=out.read_text(encoding="utf-8"))
    assert len(dom.css("table#periods tbody tr")) == DAYS
    assert len(chart_svgs(dom)) == len(CHARTS)
    assert list(home.rglob("*")) == []
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize("module", ["jinja2", "matplotlib"])
def test_a_missing_extra_is_a_one_line_error(demo: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
                                             module: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ReportDependencyError, match=rf"needs {module}.*: pip install 'scrapy-costsched\[report\]'$"):
        render_html(demo["report"])
    assert issubclass(ReportDependencyError, ImportError)


def test_a_state_without_periods_renders() -> None:
    report = Report(state="fresh", unit="requests", generated_at=None, periods=[], totals=Figures(), hosts=[],
                    page_types=[], dataset=Dataset(), wasteful_pages=[], next_plan=[], next_plan_at=None,
                    shadow_savings=[])
    dom = Selector(text=render_html(report))
    assert dom.css("p#chart-spend::text").get() == "Nothing to draw yet."
    assert dom.css("img") == []
    assert " ".join(dom.css("table#periods td::text").getall()) == "No period yet: run a crawl first."


def test_a_form_s_pages_and_moved_pages_are_shown_for_what_they_are() -> None:
    url = "http://127.0.0.1/search"
    form = "POST 'q=storm&page=2'"
    report = Report(state="s", unit="requests", generated_at=None, periods=[], totals=Figures(), hosts=[],
                    page_types=[], dataset=Dataset(pages=4, live=1, gone=3, moved=1, unlinked=1),
                    wasteful_pages=[PageRow(url, "127.0.0.1", "search", 4, 0, 4.0, 0.1, form),
                                    PageRow(url + "/old", "127.0.0.1", "search", 2, 0, 2.0, 0.1, None, url)],
                    next_plan=[PlannedPage(url, 1.0, 1.0, 1.0, 0.1, 1.0, False, form)], next_plan_at=None,
                    shadow_savings=[])
    dom = Selector(text=render_html(report))
    assert dom.css("table#wasteful-pages td.url span.form::text").get() == form
    assert dom.css("table#wasteful-pages td.url span.moved::text").getall() == [f"moved to {url}"]
    assert dom.css("table#next-plan td.url span.form::text").get() == form
    assert "3 (1 moved) (1 no longer linked)" in dom.css("table#dataset td::text").getall()
    assert "3 gone (1 of them moved; 1 of them no longer linked (COSTSCHED_UNLINKED_PERIODS))" in \
        " ".join(render_terminal(report).split())


def test_the_scout_and_where_the_budget_ends_are_shown_in_the_next_plan() -> None:
    """In the HTML and the terminal report alike; the terminal explains the scout only when one is planned."""
    scout = PlannedPage("http://127.0.0.1/section/2", 0.2, 1.0, 1.0, 3.0, 1.0, True, scout=True, planned=True)
    hub = PlannedPage("http://127.0.0.1/section/1", 0.1, 1.0, 1.0, 3.0, 1.0, True)
    article = PlannedPage("http://127.0.0.1/a/7", 0.9, 1.0, 1.0, 0.1, None, False, planned=True)
    report = Report(state="s", unit="requests", generated_at=None, periods=[], totals=Figures(), hosts=[],
                    page_types=[], dataset=Dataset(), wasteful_pages=[], next_plan=[scout, article, hub],
                    next_plan_at=None, shadow_savings=[])
    dom = Selector(text=render_html(report))
    assert [" ".join(row.css("td.url span.tag::text").getall()) for row in dom.css("table#next-plan tbody tr")] == \
        ["hub, scout", "", "hub"]
    assert "The run's budget reaches the first 2 rows." in dom.css("table#next-plan caption::text").get("")
    lines = render_terminal(report).splitlines()
    assert [line.split()[-1] for line in lines if "http://" in line] == ["scout)", "http://127.0.0.1/a/7", "(hub)"]
    assert any(line.startswith("scout: a hub the discovery reserve pays for") for line in lines)
    assert "the run's budget reaches the first 2 rows" in lines
    report.next_plan = [article, hub]
    assert "scout" not in render_terminal(report)
    # Found in a trial: a robots.txt that names a sitemap ranked third with a change rate of 0.015 a day.
    robots = PlannedPage("http://127.0.0.1/robots.txt", 0.92, 1.0, 1.0, 0.015, 4.7, False, new_pages=0.28)
    report.next_plan = [robots]
    assert render_terminal(report).splitlines()[-1].endswith("http://127.0.0.1/robots.txt (0.28 new pages)")
    assert Selector(text=render_html(report)).css("table#next-plan td.url span.tag::text").get() == "0.28 new pages"
    robots.url = "http://127.0.0.1/robots.txt?" + "x" * 80  # cut to leave room for the tag: within 100 columns
    assert max(map(len, render_terminal(report).splitlines())) <= 100
    report.next_plan = [article, hub]
    hub.planned = True  # the budget reaches every row: nothing to say
    assert "budget reaches" not in render_terminal(report)
    assert "budget reaches" not in render_html(report)


@pytest.mark.parametrize(("value", "unit", "shown"), [
    (None, "requests", "-"),
    (25.0, "requests", "25"),
    (4.090909, "requests", "4.09"),
    (12345.5, "credits", "12,345.5"),
    (2_500_000.0, "bytes", "2.50 MB"),
    (950.0, "bytes", "950 B"),
])
def test_amounts_read_as_people_write_them(value: float | None, unit: str, shown: str) -> None:
    assert human_amount(value, unit) == shown


def test_without_chromium_a_browser_test_fails_naming_make_test(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    monkeypatch.setattr(chromium, "DEBIAN_CHROMIUM", tmp_path / "chromium")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(pytest.fail.Exception, match="run `make test`, which installs Debian's chromium"):
        chromium.dump_dom(tmp_path / "page.html")
