"""Replay recorded crawl histories: the public Bing format and JSON lines.

Kolobov et al. (SIGIR 2019) published ~18.5M URLs crawled about daily for 14
weeks by Bing.  Its ``urlid_offset_history.txt`` has one row per URL::

    urlid<TAB>first crawl offset (days)<TAB>[[days since previous crawl, changed 0/1], ...]

A recorded history says whether a page changed between two crawls, not when, so
a replay keeps every recorded fact and fills in the rest: each URL's rate is the
irregular-interval MLE with one changed and one unchanged pseudo-interval of
half a day (Cho & Garcia-Molina, TOIT 2003; Kolobov et al. 2019), an interval
recorded as changed gets 1 + Poisson changes at that rate placed uniformly in it,
one recorded as unchanged gets none, and the time outside the record is Poisson.
Importance scores are read from ``urlid_imp.txt`` next to the file when present.

JSON lines (``.jsonl``) give either exact change times or a history:
``{"key": "...", "changes": [t, ...], "value": 1, "cost": 1}`` or
``{"key": "...", "first": 0.5, "history": [[1.0, 0], [1.5, 1]]}``.
"""

from __future__ import annotations

import json
import math
import random
from array import array
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING

from scrapy_costsched.model import mle_rate

from .workloads import PAGES_PER_HOST, Page, Workload, poisson_times

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .workloads import WorkloadOptions

__all__ = ["CrawlHistory", "load_bing_history", "load_jsonl", "replay_workload"]

_PSEUDO_INTERVAL = 0.5


@dataclass(frozen=True)
class CrawlHistory:
    """One URL's recorded crawls: the first at *first* (days), then (interval, changed) pairs.

    *changes* holds exact change times instead when the record has them.
    """

    key: str
    first: float
    history: tuple[tuple[float, bool], ...] = ()
    changes: tuple[float, ...] | None = None
    value: float = 1.0
    cost: float = 1.0

    def crawl_times(self) -> list[float]:
        """Times of the recorded crawls.

        >>> CrawlHistory("u", 1.0, ((0.5, False), (2.0, True))).crawl_times()
        [1.0, 1.5, 3.5]
        """
        times = [self.first]
        for interval, _ in self.history:
            times.append(times[-1] + interval)
        return times

    def rate(self) -> float:
        """The MLE change rate per day, regularised by a half-day changed and unchanged pseudo-interval."""
        if self.changes is not None:
            span = (max(self.changes) - min(0.0, min(self.changes))) if self.changes else 0.0
            return (len(self.changes) + 0.5) / (span + 0.5)  # complete observations
        if not self.history:
            return 0.0
        intervals = [max(i, 1e-6) for i, _ in self.history]  # two crawls at the same time: a tiny interval
        return mle_rate(intervals, [c for _, c in self.history], pseudo_interval=_PSEUDO_INTERVAL)


def _malformed(path: Path, line_number: int, reason: str) -> ValueError:
    return ValueError(f"{path}:{line_number}: {reason}")


def _numbered_lines(path: Path, limit: int | None) -> Iterator[tuple[int, str]]:
    """The first *limit* non-blank lines of *path* (all with None) and their line numbers: one record each."""
    with path.open(encoding="utf-8") as lines:
        yield from islice(((n, line) for n, line in enumerate(lines, 1) if line.strip()), limit)


def load_bing_history(path: str | Path, limit: int | None = None) -> list[CrawlHistory]:
    """Read the first *limit* rows of a Bing ``urlid_offset_history.txt`` file.

    Importance scores from ``urlid_imp.txt`` in the same directory become values.
    A row that does not parse raises ValueError naming the file and line.
    """
    path = Path(path)
    rows: list[CrawlHistory] = []
    for number, line in _numbered_lines(path, limit):
        fields = line.rstrip("\n").split("\t")
        if len(fields) != 3:
            raise _malformed(path, number, f"expected 3 tab-separated fields, got {len(fields)}")
        key, offset, raw = fields
        try:
            first = float(offset)
            pairs = json.loads(raw)
            history = tuple((float(i), bool(int(c))) for i, c in pairs)
        except (ValueError, TypeError) as exc:
            raise _malformed(path, number, f"cannot parse the offset or history ({exc})") from exc
        if not math.isfinite(first) or any(not 0.0 <= i < math.inf for i, _ in history):
            raise _malformed(path, number, "offsets and intervals must be finite and non-negative")
        rows.append(CrawlHistory(key, first, history))
    importance = path.with_name("urlid_imp.txt")
    if importance.exists():
        wanted = {row.key for row in rows}
        scores: dict[str, float] = {}
        with importance.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                parts = line.split("\t")
                if len(parts) == 2 and parts[0] in wanted:
                    try:
                        scores[parts[0]] = float(parts[1])
                    except ValueError:
                        raise _malformed(importance, number, f"importance {parts[1].strip()!r} is not a number") from None
        rows = [CrawlHistory(r.key, r.first, r.history, None, max(scores.get(r.key, 1.0), 1e-9), r.cost)
                for r in rows]
    return rows


def load_jsonl(path: str | Path, limit: int | None = None) -> list[CrawlHistory]:
    """Read histories or exact change times from JSON lines (see the module docstring)."""
    path = Path(path)
    rows: list[CrawlHistory] = []
    for number, line in _numbered_lines(path, limit):
        try:
            record = json.loads(line)
            key = str(record.get("key", number))
            value, cost = float(record.get("value", 1.0)), float(record.get("cost", 1.0))
            if "changes" in record:
                rows.append(CrawlHistory(key, 0.0, (), tuple(sorted(float(t) for t in record["changes"])),
                                         value, cost))
            else:
                history = tuple((float(i), bool(int(c))) for i, c in record["history"])
                rows.append(CrawlHistory(key, float(record.get("first", 0.0)), history, None, value, cost))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise _malformed(path, number, f"not a change record ({exc!r})") from exc
        if not (value >= 0.0 and cost > 0.0):
            raise _malformed(path, number, "value must be >= 0 and cost > 0")
    return rows


def _replayed_changes(row: CrawlHistory, rate: float, start: float, end: float, rng: random.Random) -> list[float]:
    """Change times consistent with the record, Poisson at *rate* where it says nothing."""
    if row.changes is not None:
        return [t for t in row.changes if start < t <= end]
    crawls = row.crawl_times()
    times = poisson_times(rng, rate, start, min(crawls[0], end))
    for (interval, changed), t0 in zip(row.history, crawls, strict=False):
        if changed and t0 < end and interval > 0.0:
            # A Poisson process given at least one event in (t0, t0 + interval]: the first one from the
            # exponential truncated to the interval, the others Poisson after it.
            first = t0 - math.log1p(rng.random() * math.expm1(-rate * interval)) / rate if rate > 0.0 else t0
            first = min(first, t0 + interval)
            later = poisson_times(rng, rate, first, t0 + interval)
            times.extend(t for t in (first, *later) if start < t <= end)
    times.extend(poisson_times(rng, rate, max(crawls[-1], start), end))
    return sorted(times)


def replay_workload(path: str, options: WorkloadOptions) -> Workload:
    """A workload whose pages follow the records in *path* (Bing TSV, or ``.jsonl``)."""
    if not Path(path).exists():
        raise ValueError(f"replay file {path!r} does not exist (use --workload replay:PATH)")
    loader = load_jsonl if path.endswith((".jsonl", ".json")) else load_bing_history
    rows = loader(path, limit=options.pages)
    if not rows:
        raise ValueError(f"replay file {path!r} has no records")
    rng = random.Random(f"replay:{options.seed}")
    period = max(1, options.revisit_period)
    start, horizon = -float(period), float(options.cycles)
    hosts = max(1, len(rows) // PAGES_PER_HOST)
    validators = options.validators
    pages = []
    for row in rows:
        rate = row.rate()
        pages.append(Page(
            key=row.key,
            value=row.value,
            cost=row.cost,
            rate=rate,
            changes=array("d", _replayed_changes(row, rate, start, horizon, rng)),
            revalidation_cost=None if validators is None else validators * row.cost,
            last_visit=-float(rng.randint(1, period)),
            host=f"h{rng.randrange(hosts):05d}",
        ))
    params = {"path": path, "records": len(rows), "validators": validators}
    return Workload(f"replay:{path}", pages, start, horizon, params)
