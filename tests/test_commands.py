"""Only crawls spend the budget: Scrapy's debugging commands run as plain Scrapy in a project with the add-on."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from scrapy_costsched.commands import spider_state, state_attributes
from scrapy_costsched.storage import StateError
from tests.helpers import ROOT

if TYPE_CHECKING:
    from pathlib import Path

    from tests.mockserver import EdgeSite

SETTINGS = """
BOT_NAME = "shopproj"
SPIDER_MODULES = ["tests.command_spider"]
COMMANDS_MODULE = "shopproj.commands"
ADDONS = {{"scrapy_costsched.Addon": 0}}
COSTSCHED_BUDGET = 5
COSTSCHED_STATE = {state!r}
ROBOTSTXT_OBEY = True
TELNETCONSOLE_ENABLED = False
SITE = {site!r}
"""

#: A project's own command that runs every spider, as ``crawl`` does: it may spend the budget.
CRAWLALL = """
from scrapy.commands import ScrapyCommand


class Command(ScrapyCommand):
    requires_project = True

    def short_desc(self):
        return "Run every spider"

    def run(self, args, opts):
        for name in self.crawler_process.spider_loader.list():
            self.crawler_process.crawl(name)
        self.crawler_process.start()
"""


@pytest.fixture
def project(tmp_path: Path, edge_site: EdgeSite) -> Path:
    """A project as ``startproject`` makes one, with the add-on, a budget and its state in ``state/``."""
    root = tmp_path / "project"
    (root / "shopproj" / "commands").mkdir(parents=True)
    (tmp_path / "state").mkdir()
    (root / "scrapy.cfg").write_text("[settings]\ndefault = shopproj.settings\n")
    (root / "shopproj" / "__init__.py").write_text("")
    (root / "shopproj" / "settings.py").write_text(SETTINGS.format(state=str(tmp_path / "state" / "state.sqlite"),
                                                                   site=edge_site.url))
    (root / "shopproj" / "commands" / "__init__.py").write_text("")
    (root / "shopproj" / "commands" / "crawlall.py").write_text(CRAWLALL)
    return root


def scrapy(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("SCRAPY_")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-m", "scrapy", *args], cwd=project, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def state_files(project: Path) -> dict[str, tuple[bytes, int]]:
    """Every file of the state directory (the database, its journal, its lock) with its content and mtime."""
    return {path.name: (path.read_bytes(), path.stat().st_mtime_ns)
            for path in sorted((project.parent / "state").iterdir())}


@pytest.mark.parametrize(("command", "shows", "control"), [
    ("fetch", "page 1 v0", ("crawl", "shop")),
    ("parse", "page 1 v0", ("runspider", str(ROOT / "tests" / "command_spider.py"))),
    ("shell", "200", ("crawlall",)),
])
def test_debug_commands_neither_spend_nor_record(project: Path, edge_site: EdgeSite, command: str, shows: str,
                                                 control: tuple[str, ...]) -> None:
    url = f"{edge_site.url}/page/1"
    args = {"fetch": ("fetch", url), "parse": ("parse", "--spider", "shop", url),
            "shell": ("shell", url, "-c", "response.status")}[command]
    own_requests = {"/robots.txt": 1, "/page/1": 1}

    first = scrapy(project, *args)
    assert shows in first.stdout
    assert f"costsched: off for `scrapy {command}` (only crawl and runspider use the budget)" in first.stderr
    assert state_files(project) == {}
    assert edge_site.hits == own_requests

    # The control: a crawl in the same project engages the scheduler and writes the state.
    scrapy(project, *control)
    assert "state.sqlite" in state_files(project)
    assert edge_site.hits == {"/robots.txt": 2, "/page/1": 2, "/page/2": 1, "/page/3": 1}

    # With known pages and budget left, the command still asks only for its own URL.
    before, hits_before = state_files(project), dict(edge_site.hits)
    scrapy(project, *args)
    assert state_files(project) == before
    assert {path: edge_site.hits[path] - hits_before.get(path, 0) for path in edge_site.hits
            if edge_site.hits[path] != hits_before.get(path, 0)} == own_requests


@pytest.mark.parametrize(("spider", "file_name"), [
    ("shop", "shop.sqlite"),
    ("shop:eu", "shop_eu.sqlite"),
    ("shop/eu", "shop_eu.sqlite"),
    ('a\\b*?"<>|', "a_b______.sqlite"),
])
def test_a_spiders_state_is_one_file_any_system_can_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         spider: str, file_name: str) -> None:
    """A spider's name may hold what a file name cannot on Windows (``shop:eu``), or a slash that would
    make a directory: the default state is one file in the project's data directory all the same, and
    so is a ``COSTSCHED_STATE`` that puts the name in its path with ``%(name)s``."""
    (tmp_path / "scrapy.cfg").write_text("[settings]\ndefault = shopproj.settings\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SCRAPY_SETTINGS_MODULE", raising=False)
    assert spider_state(None, spider) == str(tmp_path / ".scrapy" / "costsched" / file_name)
    assert spider_state("sqlite:////var/crawls/%(name)s.sqlite", spider) == f"sqlite:////var/crawls/{file_name}"
    assert spider_state("/var/crawls/all.sqlite", spider) == "/var/crawls/all.sqlite"


def test_a_state_path_takes_the_spiders_attributes_and_arguments() -> None:
    """Any other ``%(key)s`` is the spider's attribute *key*, a ``-a`` argument over the class's: one file per job."""

    class Shop:
        name = "shop"
        region = "eu"
        pages = 3

    setting = "/var/crawls/%(name)s-%(region)s-%(category)s-%(pages)s.sqlite"
    attributes = state_attributes(setting, Shop, {"category": "shoes/kids", "other": "x"})
    assert attributes == {"region": "eu", "pages": 3, "category": "shoes/kids"}
    assert spider_state(setting, "shop", attributes=attributes) == "/var/crawls/shop-eu-shoes_kids-3.sqlite"
    with pytest.raises(StateError, match=r"has %\(category\)s, and the spider shop has no category attribute "
                                         r"\(a string or a number\) to fill it with: give -a category=VALUE"):
        spider_state(setting, "shop", attributes=state_attributes(setting, Shop))


@pytest.mark.parametrize(("args", "message"), [
    (("costsched-report", "shop"), "unexpected arguments: shop"),
    (("costsched-export", "shop"), "cannot tell the format of 'shop' from its extension"),
    (("costsched-export", "shop", "out.jl"), "give one output FILE"),
    (("costsched-state", "shop", "show", "http://example.com/"), "expected show URL, export FILE or import FILE"),
])
def test_a_spider_named_as_to_crawl_is_pointed_to_the_spider_option(project: Path, args: tuple[str, ...],
                                                                    message: str) -> None:
    """``scrapy costsched-report shop``, as one types ``scrapy crawl shop``: the one-line error says how to name it,
    and only when the argument is one of the project's spiders."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("SCRAPY_")}
    env["PYTHONPATH"] = str(ROOT)
    for spider_or_not, hinted in (("shop", True), ("shoes", False)):
        argv = [spider_or_not if arg == "shop" else arg for arg in args]
        done = subprocess.run([sys.executable, "-m", "scrapy", *argv], cwd=project, env=env, capture_output=True,
                              text=True, timeout=120, check=False)
        assert done.returncode == 2
        last = done.stderr.strip().splitlines()[-1]
        assert message.replace("shop", spider_or_not) in last
        assert last.endswith(f"(to name the spider: --spider {spider_or_not})") is hinted
        assert "Global Options" not in done.stderr  # the error and the usage line, not the whole help
    assert not (project.parent / "state" / "state.sqlite").exists()
