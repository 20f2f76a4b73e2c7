"""The ``scrapy costsched-*`` commands: what they share is finding and opening a spider's state.

Each command module is loaded by Scrapy (entry point ``scrapy.commands``) whenever ``scrapy`` starts,
so they import only Scrapy and this package's light modules at the top; anything heavy (charts,
templates) is imported inside ``run``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError
from scrapy.utils.misc import load_object
from scrapy.utils.project import data_path

from scrapy_costsched.settings import Config, SettingError
from scrapy_costsched.storage import StateError, storage_from_uri

if TYPE_CHECKING:
    import argparse

    from scrapy.settings import Settings

    from scrapy_costsched.storage import StateStorage


def default_state(spider_name: str, createdir: bool = False) -> str:
    """Where a spider's state lives when ``COSTSCHED_STATE`` is not set: the project's data dir."""
    return str(Path(data_path("costsched", createdir=createdir)) / f"{spider_name}.sqlite")


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

    def spider_settings(self, opts: argparse.Namespace) -> tuple[Settings, str | None]:
        """The settings a crawl of the chosen spider runs with, and that spider's name (if any)."""
        assert self.settings is not None
        settings = self.settings.copy()
        loader = load_object(settings["SPIDER_LOADER_CLASS"]).from_settings(settings.frozencopy())
        name = opts.spider_name
        if name is None and not opts.state:
            names = loader.list()
            if len(names) == 1:
                name = names[0]
        if name is not None:
            try:
                spidercls = loader.load(name)
            except KeyError:
                raise UsageError(f"Spider not found: {name}", print_help=False) from None
            spidercls.update_settings(settings)
        return settings, name

    def state_location(self, opts: argparse.Namespace) -> tuple[str, Config]:
        """The state URI to open and the spider's costsched configuration (its clock above all)."""
        settings, name = self.spider_settings(opts)
        try:
            config = Config.from_settings(settings)
        except SettingError as exc:
            raise UsageError(str(exc), print_help=False) from None
        state = opts.state or config.state
        if not state:
            if name is None:
                raise UsageError("name the spider (--spider NAME) or the state (--state PATH)", print_help=False)
            state = default_state(name)
        return state, config

    def open_state(self, state: str, read_only: bool = True) -> StateStorage:
        """The opened store; a ``StateError`` (missing, foreign, in use) becomes the command's one-line error."""
        store = storage_from_uri(state, read_only=read_only)
        try:
            store.open()
        except StateError as exc:
            raise UsageError(str(exc), print_help=False) from None
        return store
