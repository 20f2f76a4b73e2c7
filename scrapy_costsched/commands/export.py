"""``scrapy costsched-export FILE``: the last known record of every page, with its age and how likely it is stale.

A budgeted run emits items only for the pages it visited; with ``COSTSCHED_STORE_RECORDS`` each page
keeps the items of its last full visit, and this command writes them all, through the project's feed
exporters, as a full snapshot.
"""

from __future__ import annotations

import datetime
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import UsageError
from scrapy.utils.misc import load_object

from scrapy_costsched.commands import StateCommand, reading_tracker
from scrapy_costsched.learner import DAY
from scrapy_costsched.model import p_changed
from scrapy_costsched.pages import PageState

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterator

    from scrapy.settings import BaseSettings

    from scrapy_costsched.storage import StateStorage

#: What each exported item gets on top of its own fields.
EXPORT_FIELDS = ("costsched_url", "costsched_fetched_at", "costsched_age", "costsched_stale_probability",
                 "costsched_page_type")


class Command(StateCommand):
    def syntax(self) -> str:
        return "[options] FILE"

    def short_desc(self) -> str:
        return "Write the last known record of every page, with its age and the probability it is stale"

    def long_desc(self) -> str:
        return (
            "Write the items each page yielded on its last full visit (stored when COSTSCHED_STORE_RECORDS is "
            "True) through Scrapy's feed exporters, each with costsched_url, costsched_fetched_at (ISO 8601, "
            "UTC; a 304 confirms a record, so it is the page's last visit), costsched_age (seconds), "
            "costsched_stale_probability (that the page changed since, by its estimated change rate) and "
            "costsched_page_type. The format comes from -t or FILE's extension (.jl, .jsonl, .json, .csv, "
            ".xml, or any FEED_EXPORTERS key); FILE - writes to stdout."
        )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("-t", "--format", metavar="FORMAT",
                            help="feed format, a key of FEED_EXPORTERS; by default FILE's extension")
        parser.add_argument("--host", action="append", metavar="HOST",
                            help="only pages of this host (may be repeated)")
        parser.add_argument("--page-type", action="append", metavar="TYPE",
                            help="only pages of this page type (may be repeated)")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if len(args) != 1:
            raise self.argument_error("give one output FILE (or - for stdout, with -t FORMAT)", args)
        output = args[0]
        state = self.target(opts)
        try:
            exporter_path = _exporter_path(state.settings, output, opts.format)
        except UsageError as exc:
            raise self.argument_error(str(exc), args) from None
        store = self.open_state(state.uri)
        try:
            snapshot = Snapshot(store, set(opts.host or ()), set(opts.page_type or ()))
            fields = snapshot.scan()
            if not snapshot.stored:
                raise UsageError(
                    f"The costsched state {state.uri!r} holds no stored records: set COSTSCHED_STORE_RECORDS = True in "
                    "the project's settings; each page keeps its items from its next full visit on.",
                    print_help=False)
            tracker = reading_tracker(state, store)
            pages, items = snapshot.write(output, exporter_path, _feed_options(state.settings, fields),
                                          tracker.now(), tracker.rate_of)
        finally:
            store.close()
        skipped = f"; {snapshot.unreadable} unreadable pages skipped" if snapshot.unreadable else ""
        print(f"costsched-export: {pages} pages, {items} items written to "
              f"{'stdout' if output == '-' else output}{skipped}", file=sys.stderr)


def _exporter_path(settings: BaseSettings, target: str, format_: str | None) -> Any:
    """The exporter class (or its path) of *format_*, or of *target*'s extension."""
    exporters = settings.getwithbase("FEED_EXPORTERS")
    known = ", ".join(sorted(exporters))
    if format_ is None:
        if target == "-":
            raise UsageError(f"writing to stdout needs -t FORMAT (one of {known})", print_help=False)
        format_ = Path(target).suffix[1:].lower()
        if format_ not in exporters:
            raise UsageError(f"cannot tell the format of {target!r} from its extension: give -t FORMAT "
                             f"(one of {known})", print_help=False)
    elif format_ not in exporters:
        raise UsageError(f"-t {format_!r} is not a feed format of this project: use one of {known} "
                         "(or add it to FEED_EXPORTERS)", print_help=False)
    return exporters[format_]


def _feed_options(settings: BaseSettings, fields: list[str]) -> dict[str, Any]:
    """The options Scrapy's feed exports give an exporter; the fields to export are the project's
    ``FEED_EXPORT_FIELDS`` (plus ours) or else every field of every exported item, so a CSV header
    is complete however the items differ."""
    wanted: Any = settings.getdictorlist("FEED_EXPORT_FIELDS") or None
    if isinstance(wanted, dict):
        wanted = {**wanted, **{name: name for name in EXPORT_FIELDS if name not in wanted}}
    elif wanted is not None:
        wanted = [*wanted, *(name for name in EXPORT_FIELDS if name not in wanted)]
    return {"fields_to_export": wanted or fields, "encoding": settings.get("FEED_EXPORT_ENCODING"),
            "indent": settings.getint("FEED_EXPORT_INDENT")}


class Snapshot:
    """The stored records of a state's pages (of the chosen hosts and page types, if any)."""

    def __init__(self, store: StateStorage, hosts: set[str], page_types: set[str]) -> None:
        self.store = store
        self.hosts = hosts
        self.page_types = page_types
        self.stored = 0
        """Pages with a stored record, chosen or not."""
        self.unreadable = 0

    def pages(self) -> Iterator[PageState]:
        """Every chosen live page with a stored record (a retired page's record is no longer on the site)."""
        self.stored = self.unreadable = 0
        for _, data in self.store.iter_pages():
            try:
                page = PageState.from_json(data)
            except ValueError:
                self.unreadable += 1
                continue
            if not isinstance(page.items, list) or page.last_visit is None:
                continue
            self.stored += 1
            if page.gone or (self.hosts and page.host not in self.hosts) \
                    or (self.page_types and page.page_type not in self.page_types):
                continue
            yield page

    def scan(self) -> list[str]:
        """Count the stored records; every field of the chosen ones, in order of appearance, then ours."""
        fields: dict[str, None] = {}
        for page in self.pages():
            for item in page.items or ():
                if isinstance(item, dict):
                    fields.update(dict.fromkeys(item))
        return [*(name for name in fields if name not in EXPORT_FIELDS), *EXPORT_FIELDS]

    def write(self, target: str, exporter_path: Any, options: dict[str, Any], now: float,
              rate_of: Callable[[PageState], float]) -> tuple[int, int]:
        """Export the chosen records to *target* (``-``: stdout) as of *now*, each page's staleness by the rate
        *rate_of* gives it; the pages and items written."""
        stream = sys.stdout.buffer if target == "-" else open(target, "wb")  # noqa: SIM115 - closed below
        pages = items = 0
        try:
            exporter = load_object(exporter_path)(stream, **options)
            exporter.start_exporting()
            for page in self.pages():
                assert page.last_visit is not None
                age = max(now - page.last_visit, 0.0)
                rate = rate_of(page)
                extra = {
                    "costsched_url": page.url,
                    "costsched_fetched_at": datetime.datetime.fromtimestamp(
                        page.last_visit, datetime.timezone.utc).isoformat(),
                    "costsched_age": age,
                    "costsched_stale_probability": p_changed(rate, age / DAY),
                    "costsched_page_type": page.page_type,
                }
                stored = [item for item in page.items or () if isinstance(item, dict)]
                for item in stored:
                    exporter.export_item({**item, **extra})
                pages += bool(stored)
                items += len(stored)
            exporter.finish_exporting()
        finally:
            if stream is sys.stdout.buffer:
                stream.flush()
            else:
                stream.close()
        return pages, items
