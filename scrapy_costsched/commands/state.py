"""``scrapy costsched-state show|export|import``: one page's history, and a state as JSON lines.

``export`` writes every stored row, a header first, then the meta rows (ledger, priors, host books, ...)
sorted by key, then the pages sorted by fingerprint, one JSON object a line with sorted keys, so an
export of an imported export is the same file byte for byte. ``import`` reads such a file into a new
or empty state: the backup, and the way from one store backend to another.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from scrapy.exceptions import UsageError

from scrapy_costsched.commands import StateCommand, Target, reading_tracker
from scrapy_costsched.ledger import amount
from scrapy_costsched.pages import group_of, request_line

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator

    from scrapy_costsched.storage import StateStorage
    from scrapy_costsched.tracker import Tracker

#: The first line of an export says what it is; its version is the store's schema version.
EXPORT_FORMAT = "scrapy-costsched-export"
#: Pages read from the store at a time while exporting them in fingerprint order.
EXPORT_CHUNK = 500
#: A page's key: the hex request fingerprint (SHA-1 with Scrapy's fingerprinters).
FINGERPRINT = re.compile(r"[0-9a-f]{40}")
SUBCOMMANDS = ("show", "export", "import")


def _line(row: dict[str, Any]) -> str:
    """One row of an export: always the same text for the same row."""
    return json.dumps(row, sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n"


class Command(StateCommand):
    def syntax(self) -> str:
        return "show URL | export FILE | import FILE"

    def short_desc(self) -> str:
        return "Show a page of a costsched state, export a state as JSON lines, or import one"

    def long_desc(self) -> str:
        return (
            "show URL: one page's history as stored, its estimated change rate and the index the scheduler "
            "would give it now (--json: as one JSON object). export FILE: every row of the state as JSON lines "
            "('-': standard output). import FILE: such a file into a new or empty state ('-': standard input). "
            "show and export only read, and work while a crawl runs."
        )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("--json", action="store_true", help="show: print the page as one JSON object")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if len(args) != 2 or args[0] not in SUBCOMMANDS:
            raise self.argument_error("expected show URL, export FILE or import FILE", args)
        action, target = args
        if opts.json and action != "show":
            raise UsageError("--json is an option of show", print_help=False)
        state = self.target(opts)
        if action == "show":
            self._show(state, target, opts)
        elif action == "export":
            self._export(state.uri, target)
        else:
            self._import(state.uri, target)

    # -- show ----------------------------------------------------------------

    def _show(self, state: Target, url: str, opts: argparse.Namespace) -> None:
        store = self.open_state(state.uri, read_only=True)
        try:
            tracker = reading_tracker(state, store)
            found = _find_page(store, tracker, url)
            if found is None:
                raise UsageError(f"{url} is not a page of the costsched state {state.uri!r} (pages are the requests "
                                 "the spider yields; a URL reached only through a redirect is part of the visits "
                                 "of the pages that redirect to it)", print_help=False)
            description = describe(tracker, *found)
        finally:
            store.close()
        if opts.json:
            print(json.dumps(description, indent=2, allow_nan=False))
        else:
            print(render(description))

    # -- export ----------------------------------------------------------------

    def _export(self, state: str, target: str) -> None:
        from scrapy_costsched.storage import SCHEMA_VERSION

        store = self.open_state(state, read_only=True)
        try:
            with _output(target) as out:
                out.write(_line({"format": EXPORT_FORMAT, "version": SCHEMA_VERSION}))
                metas = 0
                for key, value in store.iter_meta():
                    out.write(_line({"meta": key, "value": value}))
                    metas += 1
                pages = 0
                for fingerprint, record in _pages_in_order(store):
                    out.write(_line({"page": fingerprint, "value": record}))
                    pages += 1
        finally:
            store.close()
        print(f"Exported {pages} pages and {metas} meta rows of {state} to {target}",
              file=sys.stderr if target == "-" else sys.stdout)

    # -- import ----------------------------------------------------------------

    def _import(self, state: str, source: str) -> None:
        with _input(source) as lines:
            pages = metas = 0
            for kind, _, _, _ in _rows(lines, source):  # everything is checked before anything is written
                pages += kind == "page"
                metas += kind == "meta"
            lines.seek(0)
            store = self.open_state(state, read_only=False)
            if not _is_empty(store):
                store.close()
                raise UsageError(f"The costsched state {state!r} is not empty; import into a new state (another "
                                 "--state path), or move this one away first.", print_help=False)
            # On any error from here on the store is not closed, so nothing is committed: SQLite rolls the
            # transaction back and the state stays as empty as it was.
            for _, key, value, summary in _rows(lines, source):
                if summary is not None:
                    store.put_page(key, value, summary)
                elif key != "schema":  # the store writes its own
                    store.set_meta(key, value)
            store.close()
        print(f"Imported {pages} pages and {metas} meta rows from {source} into {state}")


def _find_page(store: StateStorage, tracker: Tracker, url: str) -> tuple[str, dict[str, Any]] | None:
    """The fingerprint and stored record of *url*'s page: *url* may be a page's fingerprint; else it is looked
    up by the fingerprint of ``Request(url)``, then by the URL stored with each page (a fingerprinter that
    canonicalises, a POST form's pages). Several pages stored with that URL are listed, to be shown by
    fingerprint."""
    from scrapy import Request

    if FINGERPRINT.fullmatch(url):
        record = store.get_page(url)
        return (url, record) if record is not None else None
    try:
        request = Request(url)
    except ValueError as exc:
        raise UsageError(f"{url!r} is not a URL or a page's fingerprint: {exc}", print_help=False) from None
    fingerprint = tracker.fingerprint(request)
    record = store.get_page(fingerprint)
    if record is not None:
        return fingerprint, record
    found = [(key, stored) for key, stored in store.iter_pages() if isinstance(stored, dict) and stored.get("url") == url]
    if len(found) > 1:
        pages = "; ".join(f"{key} ({request_line(stored.get('template'))})" for key, stored in found)
        raise UsageError(f"{len(found)} pages are stored with the URL {url} (requests that differ in method or "
                         f"body): show one by its fingerprint: {pages}", print_help=False)
    return found[0] if found else None


def _moment(t: float | None, now: float) -> dict[str, Any] | None:
    """A stored time (epoch seconds) as a date and its age in days by the crawl's clock (negative: ahead)."""
    from scrapy_costsched.learner import DAY

    if t is None:
        return None
    iso = datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    return {"epoch": t, "iso": iso, "age_days": (now - t) / DAY}


def describe(tracker: Tracker, fingerprint: str, record: dict[str, Any]) -> dict[str, Any]:
    """What *record* holds, and what planning makes of it now: its rate, P(changed) and index.

    The index is the scheduler's: the page becomes a candidate as :meth:`Tracker.candidates` makes one and
    is scored by :func:`~scrapy_costsched.model.scoring.score` with the scheduler's objective and cycle.
    """
    from scrapy_costsched.learner import DAY
    from scrapy_costsched.model import p_changed
    from scrapy_costsched.model.scoring import score
    from scrapy_costsched.pages import PageState

    try:
        page = PageState.from_json(record)
    except ValueError as exc:
        raise UsageError(f"the stored page {fingerprint} ({record.get('url')}) is unreadable: {exc}",
                         print_help=False) from None
    config, now = tracker.config, tracker.now()
    cycle = config.budget_period / DAY  # CostAwareScheduler.cycle: one plan per budget period
    estimate = page.estimate
    rate = tracker.rate_of(page)
    # None for a page waiting out its not_before (a failure backoff, or a retired page's re-check)
    candidate = next(iter(tracker.candidates(now, [fingerprint])), None)
    template = page.template
    # A Retry-After pause is the server's real time (Health.pause_left), whatever the crawl's clock.
    pause, real_now = tracker.health.pause_left(page.host), time.time()
    revealed = tracker.revealed_kind(page.group) if page.links is not None else None  # what a hub's new pages are
    return {
        "fingerprint": fingerprint,
        "url": page.url,
        "host": page.host,
        "page_type": page.page_type,
        "value": page.value,
        "value_weight": tracker.value_of(page),
        "now": _moment(now, now),
        "first_seen": _moment(page.first_seen, now),
        "last_visit": _moment(page.last_visit, now),
        "last_attempt": _moment(page.last_attempt, now),
        "visits": page.visits,
        "changes": page.changes,
        "failures": page.failures,
        "consecutive_failures": page.consecutive_failures,
        "last_failure": page.last_failure,
        "not_found_in_a_row": page.gone_strikes,
        "refused_in_a_row": page.refusals,
        "empty_in_a_row": page.empty_strikes,
        "gone": page.gone,
        "moved_to": page.moved_to,
        "rate_per_day": {
            "rate": rate,
            "low": estimate.low if estimate is not None else None,
            "high": estimate.high if estimate is not None else None,
            "source": "estimate" if estimate is not None else "group prior",
        },
        "p_changed": None if page.last_visit is None else p_changed(rate, max(now - page.last_visit, 0.0) / DAY),
        "new_pages_per_day": page.links.rate(tracker.learner.link_prior_of(page.group)) if page.links is not None
        else None,
        "new_page_kind": revealed,
        "new_page_value": tracker.revealed_value(page.group) if revealed is not None else None,
        "new_page_rate_per_day": tracker.prior_rate(group_of(page.host, revealed)) if revealed is not None else None,
        "index": None if candidate is None else score(candidate, config.objective, cycle=cycle),
        "objective": config.objective,
        "cycle_days": cycle,
        "cost": None if candidate is None else {
            "unit": tracker.billing.unit,
            "full": candidate.cost,
            "not_modified": candidate.revalidation_cost,
            "expected": candidate.expected_cost,
        },
        "validators": {"etag": page.etag, "last_modified": _moment(page.last_modified, now)},
        "bytes": {name: None if mean is None else {"mean": mean.mean, "count": mean.count}
                  for name, mean in (("full", page.full_bytes), ("not_modified", page.not_modified_bytes))},
        "not_before": _moment(page.not_before, now),
        "unlinked_since": _moment(page.unlinked_since, now),
        "unlinked_periods": config.unlinked_periods,
        "host_paused_until": _moment(real_now + pause, real_now) if pause > 0 else None,
        "host_paused_because": tracker.health.pause_reason(page.host) if pause > 0 else None,
        "template": None if template is None else {
            name: template.get(name) for name in ("method", "callback", "errback", "meta", "cb_kwargs", "body")},
    }


def _age(days: float) -> str:
    """``3.2 h ago``, ``in 2.0 days``: an age for people."""
    seconds = abs(days) * 86400.0
    if seconds < 120:
        text = f"{seconds:.0f} s"
    elif seconds < 7200:
        text = f"{seconds / 60:.0f} min"
    elif seconds < 2 * 86400:
        text = f"{seconds / 3600:.1f} h"
    else:
        text = f"{abs(days):.1f} days"
    return f"{text} ago" if days >= 0 else f"in {text}"


def _when(moment: dict[str, Any] | None, missing: str = "never") -> str:
    return missing if moment is None else f"{moment['iso']} ({_age(moment['age_days'])})"


def _amount(value: float, unit: str) -> str:
    """``1 request``, ``2.5 requests``, ``10080 bytes``."""
    return amount(value, unit, ".0f" if value >= 100 else ".4g")


def _bytes(mean: dict[str, Any] | None) -> str:
    return "not measured" if mean is None else f"{mean['mean']:.0f} (mean of {mean['count']})"


def render(page: dict[str, Any]) -> str:
    """:func:`describe`'s page as the lines ``show`` prints."""
    rate = page["rate_per_day"]
    if rate["source"] == "estimate":
        rate_text = f"{rate['rate']:.4g} changes a day (90% interval {rate['low']:.4g} to {rate['high']:.4g})"
    else:
        rate_text = (f"{rate['rate']:.4g} changes a day (no estimate yet: its group's prior median, or its host's "
                     "for an untyped page)")
    cost = page["cost"]
    unlinked = page["unlinked_since"]
    if page["index"] is None and unlinked is not None and page["unlinked_periods"]:
        index_text = (f"none: unlinked for {page['unlinked_periods']} budget periods or more "
                      "(COSTSCHED_UNLINKED_PERIODS); a link to it brings it back")
        cost_text = "not planned now"
    elif page["index"] is None:
        index_text = f"none: not a candidate before {_when(page['not_before'])}"
        cost_text = "not planned now"
    else:
        index_text = f"{page['index']:.4g} ({page['objective']}, {page['cycle_days']:g}-day cycle)"
        cost_text = _amount(cost["full"], cost["unit"])
        if cost["not_modified"] is not None:
            cost_text += (f", {_amount(cost['not_modified'], cost['unit'])} if answered 304, "
                          f"{_amount(cost['expected'], cost['unit'])} expected")
    template = page["template"]
    if template is None:
        template_text = "none (its callback is not a spider method: only the spider can yield it)"
    else:
        template_text = (f"{template['method']} callback={template['callback']} errback={template['errback']} "
                         f"meta={json.dumps(template['meta'], sort_keys=True)}")
        if template["cb_kwargs"]:
            template_text += f" cb_kwargs={json.dumps(template['cb_kwargs'], sort_keys=True)}"
        if template["body"]:  # what tells a form's pages apart (they share a URL)
            template_text += f" body={request_line(template).partition(' ')[2]}"
    retired = f", moved permanently to {page['moved_to']}" if page["moved_to"] else ", gone" if page["gone"] else ""
    last_failure = f", the last: {page['last_failure']}" if page["last_failure"] else ""
    visits_text = (f"{page['visits']}, {page['changes']} changed, {page['failures']} failed "
                   f"({page['consecutive_failures']} in a row{last_failure}){retired}")
    if page["not_found_in_a_row"]:
        strikes = page["not_found_in_a_row"]
        visits_text += f"; since then 404 or 410 {strikes} time{'s' if strikes > 1 else ''} in a row"
    if page["empty_in_a_row"]:
        empties = page["empty_in_a_row"]
        visits_text += (f"; since then without the items it used to yield {empties} time{'s' if empties > 1 else ''} "
                        "in a row, while other pages of its type yielded theirs: planned at half its worth each time")
    if page["refused_in_a_row"]:
        refusals = page["refused_in_a_row"]
        visits_text += (f"; refused before download {refusals} time{'s' if refusals > 1 else ''} in a row (robots.txt, "
                        "offsite rules or a downloader middleware): planned at half its worth per refusal")
    if unlinked is not None:
        visits_text += (f"; unlinked since {_when(unlinked)}: a page that linked to it no longer does, and no request "
                        "for it was seen since")
    p_changed = page["p_changed"]
    validators = page["validators"]
    lines = [
        ("url", page["url"]),
        ("fingerprint", page["fingerprint"]),
        ("host", page["host"]),
        ("page type", page["page_type"]),
        ("value", f"{page['value']} (weight {page['value_weight']:g})"),
        ("now", page["now"]["iso"]),
        ("first seen", _when(page["first_seen"])),
        ("last visit", _when(page["last_visit"])),
        ("last attempt", _when(page["last_attempt"])),
        ("visits", visits_text),
        ("change rate", rate_text),
        ("P(changed)", "none: retired" if page["gone"] else "never fetched" if p_changed is None
         else f"{p_changed:.3f} since the last visit"),
    ]
    if page["new_pages_per_day"] is not None:
        lines.append(("new pages", (f"{page['new_pages_per_day']:.4g} a day (links to pages the crawl did not know), "
                                    f"each priced as a page of type {page['new_page_kind']!r} worth "
                                    f"{page['new_page_value']:.3g} at {page['new_page_rate_per_day']:.4g} changes a day")))
    lines += [
        ("next index", index_text),
        ("visit cost", cost_text),
        ("etag", validators["etag"] or "none"),
        ("last-modified", _when(validators["last_modified"], "none")),
        ("bytes", f"full fetch {_bytes(page['bytes']['full'])}; 304 answer {_bytes(page['bytes']['not_modified'])}"),
        ("not before", _when(page["not_before"], "none")),
    ]
    if page["host_paused_until"] is not None:
        paused = f"until {_when(page['host_paused_until'])}: it {page['host_paused_because']}, and no run sends it "
        lines.append(("host paused", paused + "anything before then"))
    lines.append(("template", template_text))
    width = max(len(name) for name, _ in lines)
    return "\n".join(f"{name:<{width}}  {text}" for name, text in lines)


def _pages_in_order(store: StateStorage) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every page, by fingerprint, holding :data:`EXPORT_CHUNK` records in memory at a time."""
    keys = sorted(key for key, _ in store.iter_summaries())
    for start in range(0, len(keys), EXPORT_CHUNK):
        chunk = dict(store.get_pages(keys[start:start + EXPORT_CHUNK]))
        for key in sorted(chunk):
            yield key, chunk[key]


def _is_empty(store: StateStorage) -> bool:
    """No page and no meta row but the schema the store wrote itself."""
    return next(iter(store.iter_summaries()), None) is None and all(key == "schema" for key, _ in store.iter_meta())


@contextmanager
def _output(target: str) -> Iterator[IO[str]]:
    """Where an export goes: standard output for ``-``; else a partial file next to *target* that replaces
    it once complete, so a failed export leaves no partial file behind, nor a previous one damaged."""
    if target == "-":
        yield sys.stdout
        sys.stdout.flush()
        return
    path = Path(target)
    partial = path.with_name(f".{path.name}.partial")
    try:
        out = partial.open("w", encoding="ascii", newline="\n")  # JSON escapes everything else
    except OSError as exc:
        raise UsageError(f"cannot write {target}: {exc.strerror or exc}", print_help=False) from None
    try:
        with out:
            yield out
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(path)


@contextmanager
def _input(source: str) -> Iterator[IO[bytes]]:
    """The export to import, in binary and readable twice: the file, or standard input (``-``) kept in a
    temporary file."""
    if source == "-":
        with tempfile.TemporaryFile() as copy:
            shutil.copyfileobj(sys.stdin.buffer, copy)
            copy.seek(0)
            yield copy
        return
    try:
        lines = Path(source).open("rb")  # noqa: SIM115 (the with below closes it)
    except OSError as exc:
        raise UsageError(f"cannot read {source}: {exc.strerror or exc}", print_help=False) from None
    with lines:
        yield lines


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _rows(lines: IO[bytes], source: str) -> Iterator[tuple[str, str, Any, list[Any] | None]]:
    """The rows of an export as ``(kind, key, value, summary)``, kind ``"meta"`` or ``"page"`` (a page with
    its planning summary), each checked; a ``UsageError`` naming the line at the first that is not as
    :meth:`Command._export` writes them."""
    from scrapy_costsched.pages import PageState
    from scrapy_costsched.storage import SCHEMA_VERSION

    seen: dict[tuple[str, str], int] = {}
    number = 0
    for number, raw in enumerate(lines, 1):
        def fail(problem: str, number: int = number) -> UsageError:
            return UsageError(f"{source} line {number}: {problem}; nothing was imported.", print_help=False)

        try:
            row = json.loads(raw.decode("utf-8").rstrip("\r\n"), parse_constant=_reject_constant)
        except UnicodeDecodeError:
            raise fail("not UTF-8 text") from None
        except json.JSONDecodeError as exc:
            raise fail(f"not JSON ({exc.msg} at column {exc.colno})") from None
        except ValueError as exc:  # NaN or an infinity
            raise fail(f"not JSON ({exc})") from None
        if number == 1:
            if not isinstance(row, dict) or row.get("format") != EXPORT_FORMAT or set(row) != {"format", "version"}:
                raise fail(f'not a scrapy-costsched export (its first line is {{"format": "{EXPORT_FORMAT}", '
                           '"version": N})')
            if row["version"] != SCHEMA_VERSION:
                raise fail(f"an export of schema version {row['version']!r}, and this scrapy-costsched imports "
                           f"version {SCHEMA_VERSION}")
            continue
        kind = next((k for k in ("meta", "page") if isinstance(row, dict) and set(row) == {k, "value"}), None)
        if kind is None:
            raise fail('expected {"meta": KEY, "value": ...} or {"page": FINGERPRINT, "value": RECORD}')
        key = row[kind]
        if not isinstance(key, str) or not key:
            raise fail(f"the {kind} key must be a non-empty string, not {key!r}")
        if (kind, key) in seen:
            raise fail(f"{kind} {key!r} appears twice (also on line {seen[kind, key]})")
        seen[kind, key] = number
        value, summary = row["value"], None
        if kind == "page":
            try:
                summary = PageState.from_json(value).summary()
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                raise fail(f"page {key!r}: {exc}") from None
        yield kind, key, value, summary
    if number == 0:
        raise UsageError(f"{source} is empty, not a scrapy-costsched export; nothing was imported.",
                         print_help=False)
