"""Shared fixtures. In-process crawlers need an installed reactor on Scrapy 2.13 (``get_crawler`` asks for
it); newer Scrapy installs one itself. The asyncio reactor is the one ``scrapy crawl`` uses by default."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from scrapy.utils.reactor import install_reactor

from scrapy_costsched.learner import DAY
from tests.components import Run
from tests.helpers import NOW, DemoSite, start_site
from tests.mockserver import EdgeSite

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

install_reactor("twisted.internet.asyncioreactor.AsyncioSelectorReactor")


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[Any]:
    """``runs(**settings)``: the next day's in-process crawl (:class:`~tests.components.Run`) over one state."""
    opened: list[Run] = []

    def make(**settings: Any) -> Run:
        if opened:
            opened[-1].close()
        NOW[0] += DAY
        opened.append(Run(tmp_path / "state.sqlite", settings))
        return opened[-1]

    yield make
    if opened:
        opened[-1].close()


@pytest.fixture
def edge_site() -> Iterator[EdgeSite]:
    site = EdgeSite()
    yield site
    site.close()


@pytest.fixture
def tiny_shop(tmp_path: Path) -> Iterator[DemoSite]:
    """A demo shop of six products on 127.0.0.1, for crawls that are refused before they fetch much."""
    mp = pytest.MonkeyPatch()
    mp.setenv("DEMO_CLOCK_FILE", str(tmp_path / "clock"))
    demo, server = start_site(tmp_path, products=6, categories=1, seed=5, horizon_days=3, new_per_day=0)
    yield demo
    server.close()
    mp.undo()
