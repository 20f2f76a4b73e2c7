"""Which Scrapy command this crawl runs under: only crawls may spend the budget and write the state.

``scrapy fetch``, ``parse``, ``shell``, ``view``, ``check`` and ``bench`` build ordinary crawlers, and
Scrapy records no command name. The command object is found on the call stack instead: every command
creates its crawlers, applies their settings (the add-on's ``update_settings``) and runs the reactor
from inside its own ``run`` method (checked on Scrapy 2.13 and 2.19). ``scrapy shell`` builds its
components in a second thread, while the main thread stays in ``run``, so the main thread is looked at
too.
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING

from scrapy.commands import ScrapyCommand

if TYPE_CHECKING:
    from types import FrameType

#: Scrapy's own commands that run a crawl: the only ones of ``scrapy.commands`` that may spend.
CRAWL_COMMANDS = frozenset({"crawl", "runspider"})
_PACKAGE = "scrapy.commands"


def debug_command() -> str | None:
    """The name of the Scrapy command running now (``"fetch"``, ``"shell"``, ...) unless it is a crawl.

    ``None`` for ``scrapy crawl`` and ``scrapy runspider``, for scripts that use ``CrawlerProcess`` or
    ``CrawlerRunner`` themselves and for commands defined outside ``scrapy.commands`` (a project's
    ``crawlall``, even one that subclasses a Scrapy command): those may engage the scheduler.
    """
    command = _running_command()
    if command is None:
        return None
    package, _, name = type(command).__module__.rpartition(".")
    if package != _PACKAGE or name in CRAWL_COMMANDS:
        return None
    return name


def _running_command() -> ScrapyCommand | None:
    """The innermost command object whose method is on this thread's stack, else on the main thread's."""
    stacks: list[FrameType | None] = [sys._getframe()]
    if threading.current_thread() is not threading.main_thread():
        stacks.append(sys._current_frames().get(threading.main_thread().ident or 0))
    for frame in stacks:
        while frame is not None:
            module = frame.f_globals.get("__name__", "")
            if module == _PACKAGE or module.startswith(f"{_PACKAGE}."):
                command = frame.f_locals.get("self")
                if isinstance(command, ScrapyCommand):
                    return command
            frame = frame.f_back
    return None
