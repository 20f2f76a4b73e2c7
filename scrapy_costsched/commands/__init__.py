"""The ``scrapy costsched-*`` commands: what they share is finding and opening a spider's state.

Each command module is loaded by Scrapy (entry point ``scrapy.commands``) whenever ``scrapy`` starts,
so they import only Scrapy and this package's light modules at the top; anything heavy (charts,
templates) is imported inside ``run``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import NotConfigured, UsageError
from scrapy.utils.conf import arglist_to_dict
from scrapy.utils.misc import load_object
from scrapy.utils.project import data_path

from scrapy_costsched.settings import STATE_PLACEHOLDER, Config, SettingError
from scrapy_costsched.storage import StateError, storage_from_uri

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping

    from scrapy import Spider
    from scrapy.settings import Settings
    from scrapy.spiderloader import SpiderLoaderProtocol

    from scrapy_costsched.storage import StateStorage
    from scrapy_costsched.tracker import Tracker


#: Characters Windows refuses in a file name (``/`` and ``\\`` would also make directories).
_UNSAFE_IN_FILE_NAMES = re.compile(r'[<>:"/\\|?*\x00-\x1f]')


def default_state(spider_name: str, createdir: bool = False) -> str:
    """Where a spider's state lives when ``COSTSCHED_STATE`` is not set: the project's data dir.

    Run outside the project's directory (``SCRAPY_SETTINGS_MODULE`` set by a cron job, a container or
    Scrapyd), Scrapy finds no ``scrapy.cfg`` to place that dir by, and a state put beside the working
    directory instead would start from nothing whenever it differs: the user is asked for a path.
    The file is named after the spider, with ``_`` for what no file name may hold on some system
    (a spider ``shop:eu`` or ``shop/eu`` keeps ``shop_eu.sqlite``).
    """
    file_name = f"{_file_safe(spider_name)}.sqlite"
    try:
        return str(Path(data_path("costsched", createdir=createdir)) / file_name)
    except NotConfigured:
        raise StateError(
            f"COSTSCHED_STATE is not set, and outside the project's directory ({Path.cwd()} has no scrapy.cfg "
            "above it) Scrapy cannot say where the project's data directory is: set COSTSCHED_STATE to the "
            "state's path (such as /var/lib/crawls/%(name)s.sqlite, a file per spider), or run scrapy from the "
            "project's directory.") from None


def spider_state(setting: str | None, spider_name: str, createdir: bool = False,
                 attributes: Mapping[str, Any] | None = None) -> str:
    """The state a crawl of *spider_name* opens: *setting* (``COSTSCHED_STATE``) with its placeholders filled as a
    ``FEEDS`` URI fills them: ``%(name)s`` the spider's name, so one setting in ``settings.py`` gives every spider
    of a project a file of its own, and any other ``%(key)s`` the spider's attribute *key* (from *attributes*),
    such as a ``-a category=shoes`` argument, so each job of one spider over part of a site has one; unset,
    :func:`default_state`."""
    if setting is None:
        return default_state(spider_name, createdir)

    def fill(match: re.Match[str]) -> str:
        key = match.group(1)
        if key == "name":
            return _file_safe(spider_name)
        value = (attributes or {}).get(key)
        if not isinstance(value, (str, int, float)):
            raise StateError(f"COSTSCHED_STATE ({setting!r}) has %({key})s, and the spider {spider_name} has no "
                             f"{key} attribute (a string or a number) to fill it with: give -a {key}=VALUE, as to "
                             "its crawl, or set the attribute in the spider")
        return _file_safe(str(value))

    return STATE_PLACEHOLDER.sub(fill, setting)


def state_attributes(setting: str | None, spider: object, arguments: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The attributes of *spider* (a spider, or its class) that *setting*'s placeholders name, *arguments* (``-a``)
    over them: what :func:`spider_state` fills them with."""
    names = set(STATE_PLACEHOLDER.findall(setting or "")) - {"name"}
    found = {key: getattr(spider, key) for key in names if hasattr(spider, key)}
    found.update((key, value) for key, value in (arguments or {}).items() if key in names)
    return found


def _file_safe(text: str) -> str:
    """*text* (a spider's name, an attribute's value) as part of one file name on any system."""
    return _UNSAFE_IN_FILE_NAMES.sub("_", text)


@dataclass
class Target:
    """The state a command works on (*uri*), and the settings of the crawl that writes it: *config* gives
    its clock, budget and billing, as the crawl reads them."""

    uri: str
    config: Config
    settings: Settings


def reading_tracker(target: Target, store: StateStorage) -> Tracker:
    """A tracker with the crawl's settings (add-ons applied), request fingerprinter and billing model over an
    open (read-only) *store*, never opened for a crawl: planning's view of a page, or of the next plan."""
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector
    from scrapy.utils.misc import build_from_crawler

    from scrapy_costsched.tracker import Tracker

    crawler = Crawler(Spider, target.settings)
    crawler.addons.load_settings(crawler.settings)  # an add-on may set REQUEST_FINGERPRINTER_CLASS
    crawler.stats = StatsCollector(crawler)
    crawler.request_fingerprinter = build_from_crawler(
        load_object(crawler.settings["REQUEST_FINGERPRINTER_CLASS"]), crawler)
    tracker = Tracker(crawler, target.config)
    tracker.attach(store)
    # Spend counted on other terms (COSTSCHED_BILLING or the period's length changed since the last crawl) as the
    # next crawl will count it, not read as this unit's.
    tracker.ledger.rebase(tracker.now(), record=False)
    return tracker


class StateCommand(ScrapyCommand):
    """A command that works on one spider's state, named by the spider or by ``--state``.

    The spider's ``custom_settings`` apply, as in ``scrapy crawl``, so a ``COSTSCHED_STATE`` or
    ``COSTSCHED_CLOCK`` set there is the one used.
    """

    requires_project = False
    requires_crawler_process = False  # Scrapy 2.14+: no reactor or crawler process is needed

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("--state", metavar="URI",
                            help="the state to read (a path or sqlite:///path), by default the spider's")
        parser.add_argument("--spider", dest="spider_name", metavar="SPIDER",
                            help="the spider whose state to read (needed unless --state is given, or the "
                                 "project has a single spider)")
        parser.add_argument("-a", dest="spargs", action="append", default=[], metavar="NAME=VALUE",
                            help="a spider argument, as given to its crawl: fills %%(NAME)s in COSTSCHED_STATE "
                                 "(may be repeated)")

    def spider_loader(self) -> SpiderLoaderProtocol:
        """The project's spiders, loaded as ``scrapy crawl`` loads them."""
        assert self.settings is not None
        loader: SpiderLoaderProtocol = load_object(self.settings["SPIDER_LOADER_CLASS"]).from_settings(
            self.settings.frozencopy())
        return loader

    def argument_error(self, message: str, args: list[str]) -> UsageError:
        """*message* as the command's one-line error; a spider's name given first, as to ``scrapy crawl``,
        is pointed to ``--spider``."""
        if args and args[0] in self.spider_loader().list():
            message += f" (to name the spider: --spider {args[0]})"
        return UsageError(message, print_help=False)

    def spider_settings(self, opts: argparse.Namespace) -> tuple[Settings, str | None, type[Spider] | None]:
        """The settings a crawl of the chosen spider runs with, that spider's name and class (if any)."""
        assert self.settings is not None
        settings = self.settings.copy()
        loader = self.spider_loader()
        name = opts.spider_name
        if name is None and not opts.state:
            names = loader.list()
            if len(names) == 1:
                name = names[0]
        if name is None:
            return settings, None, None
        try:
            spidercls = loader.load(name)
        except KeyError:
            raise UsageError(f"Spider not found: {name}", print_help=False) from None
        spidercls.update_settings(settings)
        return settings, name, spidercls

    def target(self, opts: argparse.Namespace) -> Target:
        """The state to work on and the settings of the crawl that writes it."""
        try:
            arguments = arglist_to_dict(opts.spargs)
        except ValueError:
            raise UsageError("Invalid -a value, use -a NAME=VALUE", print_help=False) from None
        settings, name, spidercls = self.spider_settings(opts)
        try:
            config = Config.from_settings(settings)
        except SettingError as exc:
            raise UsageError(str(exc), print_help=False) from None
        if opts.state:
            return Target(opts.state, config, settings)
        if name is None:
            if config.state is not None and not STATE_PLACEHOLDER.search(config.state):
                return Target(config.state, config, settings)
            raise UsageError("name the spider (--spider NAME) or the state (--state PATH)", print_help=False)
        try:
            return Target(spider_state(config.state, name, attributes=state_attributes(config.state, spidercls,
                                                                                        arguments)),
                          config, settings)
        except StateError as exc:
            raise UsageError(str(exc), print_help=False) from None

    def open_state(self, state: str, read_only: bool = True) -> StateStorage:
        """The opened store; a ``StateError`` (missing, foreign, in use) becomes the command's one-line error."""
        store = storage_from_uri(state, read_only=read_only)
        try:
            store.open()
        except StateError as exc:
            raise UsageError(str(exc), print_help=False) from None
        return store
