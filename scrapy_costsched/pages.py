"""A known page as stored: its request template, value, last record and change history."""

from __future__ import annotations

import datetime
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlparse

from itemadapter import ItemAdapter
from scrapy.utils.request import request_from_dict

from scrapy_costsched.model import ChangeStats, RateEstimate
from scrapy_costsched.model.discovery import NewLinkStats
from scrapy_costsched.visits import RUN_META

if TYPE_CHECKING:
    from collections.abc import Sequence

    from scrapy import Request, Spider

#: The page type of a page whose kind its spider has not shown: neither ``costsched_page_type`` in its request's meta
#: nor one class of item from its visits (a new URL, or a page that yields no items, as lists and hubs).
UNTYPED = "default"
#: Characters of a stored request body shown where a form's pages, which share a URL, are told apart.
BODY_SHOWN = 120
#: Request.meta keys Scrapy or this add-on set per attempt; never part of a template.
#: ``depth`` is kept: a re-issued page keeps its depth, so ``DEPTH_LIMIT`` still applies to it.
_TRANSIENT_META = RUN_META | {
    "download_latency", "download_slot", "redirect_reasons", "redirect_times", "redirect_ttl", "redirect_urls", "retry_times",
    "download_timeout", "handle_httpstatus_all", "is_start_request",
}


#: Outlinks a page's record keeps to tell the pages it stops linking (a page that links to more, a sitemap, keeps none:
#: it would rewrite them all at each visit).
MAX_TRACKED_OUTLINKS = 1000
#: Weight of the newest measurement in a running mean of bytes (the last ~10 visits dominate).
BYTES_WEIGHT = 0.1
#: Once the mean is settled, a measurement counts as at most this many times the mean (or at least its
#: inverse): one huge or empty answer moves the price by a step, a lasting change in a few.
BYTES_CLIP = 4.0


@dataclass
class MeanBytes:
    """A running mean of the bytes one kind of answer moved (request and response, headers included)."""

    mean: float = 0.0
    count: int = 0

    def add(self, size: float) -> None:
        """Plain mean over the first visits, then a moving one, so a site that changes its pages is followed;
        from then on each measurement is clipped to :data:`BYTES_CLIP` times the mean, so an outlier does not
        set the price.

        >>> bytes_ = MeanBytes()
        >>> for size in (100, 300): bytes_.add(size)
        >>> bytes_
        MeanBytes(mean=200.0, count=2)
        >>> settled = MeanBytes(mean=10_000.0, count=20)
        >>> settled.add(5_000_000)
        >>> settled.mean
        13000.0
        """
        self.count += 1
        weight = max(1.0 / self.count, BYTES_WEIGHT)
        if weight == BYTES_WEIGHT and self.mean > 0:
            size = min(max(size, self.mean / BYTES_CLIP), self.mean * BYTES_CLIP)
        self.mean += (size - self.mean) * weight

    def to_json(self) -> list[float]:
        return [self.mean, self.count]

    @classmethod
    def from_json(cls, data: object) -> MeanBytes:
        if not (isinstance(data, list) and len(data) == 2 and all(isinstance(n, (int, float)) and n >= 0 for n in data)):
            raise ValueError(f"malformed byte mean: {data!r}")
        return cls(float(data[0]), int(data[1]))


@dataclass
class Hops:
    """The downloads a visit of one kind of page brings besides its answer: how many a visit, and their bytes.

    The redirects it goes through first: a link to a URL that redirects (``/p/7`` to ``/post/7/``, ``http`` to
    ``https``) costs every visit an attempt more, which each billing model charges, so a visit is priced with its
    kind of page's hops. The files a media pipeline downloads for its items are counted the same way
    (:meth:`~scrapy_costsched.hosts.HostBook.add_media`).

    >>> hops = Hops()
    >>> for sizes in ([200.0], [], [200.0, 300.0]): hops.add(sizes)
    >>> hops.per_visit, round(hops.bytes.mean, 6)
    (1.0, 233.333333)
    """

    per_visit: float = 0.0
    visits: int = 0
    bytes: MeanBytes = field(default_factory=MeanBytes)

    def add(self, sizes: Sequence[float]) -> None:
        """One visit, through redirects that moved *sizes* bytes each (none: straight to its answer)."""
        self.visits += 1
        self.per_visit += (len(sizes) - self.per_visit) * max(1.0 / self.visits, BYTES_WEIGHT)
        for size in sizes:
            self.bytes.add(size)

    def to_json(self) -> list[Any]:
        return [self.per_visit, self.visits, self.bytes.to_json()]

    @classmethod
    def from_json(cls, data: object) -> Hops:
        if not (isinstance(data, list) and len(data) == 3 and isinstance(data[0], (int, float)) and data[0] >= 0
                and isinstance(data[1], int) and data[1] >= 0):
            raise ValueError(f"malformed redirect hops: {data!r}")
        return cls(float(data[0]), data[1], MeanBytes.from_json(data[2]))


def group_of(host: str, page_type: str) -> str:
    """Pages that share a prior: same host, same page type."""
    return f"{host}|{page_type}"


@dataclass
class PageState:
    """Everything the crawl remembers about one page (keyed by request fingerprint)."""

    url: str
    host: str
    page_type: str
    value: str | float
    first_seen: float
    template: dict[str, Any] | None = None
    last_visit: float | None = None
    last_attempt: float | None = None
    record: str | None = None
    record_kind: str | None = None
    item_hashes: list[str] = field(default_factory=list)
    item_keys: dict[str, str] = field(default_factory=dict)
    hash_config: str | None = None
    record_shape: str | None = None
    """The hash of the set of its record's item shapes (:attr:`~.records.ItemDigest.shape`);
    ``None`` for a record of links, or one written before shapes were kept."""
    last_modified: float | None = None
    """The ``Last-Modified`` (epoch seconds) of the response the record comes from."""
    stats: ChangeStats = field(default_factory=ChangeStats)
    estimate: RateEstimate | None = None
    visits: int = 0
    changes: int = 0
    failures: int = 0
    gone: bool = False
    consecutive_failures: int = 0
    """Failed visits since the last one that answered; each doubles the wait before the next attempt."""
    gone_strikes: int = 0
    """Visits in a row that answered 404 or 410; the page is retired after several (a 410 counts for all)."""
    empty_strikes: int = 0
    """Visits in a row that yielded none of the items the page used to while other pages of its type yielded
    theirs: a page gone that still answers 200 ("sold"), counted as 404s are."""
    refusals: int = 0
    """Attempts in a row refused before download (robots.txt, offsite rules, a downloader middleware's
    ``IgnoreRequest``): like a 404, each says the page is not there for this crawl, and halves its worth."""
    not_before: float | None = None
    """No attempt before this time (failure backoff, or the rare re-check of a retired page)."""
    last_failure: str | None = None
    """Why the last visit failed, if it did (an HTTP status, the download's or the callback's exception): what
    ``scrapy costsched-state show`` answers to "why is this page not visited"."""
    links: NewLinkStats | None = None
    """New outlinks per visit, for a page that links out at all: what it is worth as a hub."""
    field_hashes: list[dict[str, str]] | None = None
    """The last record's first items' hashes per field (:attr:`.Visit.item_fields`), kept for pages in the
    volatile-field sample (stored by earlier versions for a page of one item: that item's)."""
    etag: str | None = None
    """The ``ETag`` of the last answer (header form), sent back as ``If-None-Match`` when the host earned it."""
    redirected: bool = False
    """The last answer came from another URL (a redirect), so its validators are not sent to this one, and the
    next visit is priced with the redirects its group's visits go through."""
    moved_to: str | None = None
    """Where the page moved permanently (a 301 or 308 to a page the crawl knows, or on its host): it is retired like a
    page gone."""
    full_bytes: MeanBytes | None = None
    """Bytes a full fetch of the page moved (request and response, headers included, body as transferred)."""
    not_modified_bytes: MeanBytes | None = None
    """Bytes a 304 answer for the page moved."""
    no_change_cost: float = 0.0
    """What the visits that found the page unchanged cost, all told (the report's most wasteful pages)."""
    outlinks: list[str] | None = None
    """The pages (fingerprints) its last full visit linked to, sorted, to tell the ones it stops linking; ``None``
    before such a visit, or when they were more than :data:`MAX_TRACKED_OUTLINKS`."""
    unlinked_since: float | None = None
    """When a page that linked to it stopped doing so, no request for it seen since: ``COSTSCHED_UNLINKED_PERIODS``
    after that, plans leave it out (retired as unlinked) until a link or a start request names it again."""
    items: list[dict[str, Any]] | None = None
    """With ``COSTSCHED_STORE_RECORDS``: the items of the last full visit as they left the pipelines
    (:func:`stored_item`), current as of :attr:`last_visit` (a 304 confirms them)."""

    @property
    def group(self) -> str:
        return group_of(self.host, self.page_type)

    @property
    def form(self) -> str | None:
        """Method and body of a page that is not a plain GET of its URL (a form's pages share one URL)."""
        if self.template is None or (self.template.get("method") == "GET" and not self.template.get("body")):
            return None
        return request_line(self.template)

    def summary(self) -> list[Any]:
        """The compact row planning reads: the fields of :class:`Summary`, in order."""
        estimate = self.estimate
        rate, low, high = (estimate.rate, estimate.low, estimate.high) if estimate else (None, None, None)
        cost = self.template["meta"].get("costsched_cost") if self.template else None
        # A 404 or 410 (or a visit without the page's items) since the last visit showed the page changed (it went
        # missing) then.
        missing = self.gone_strikes or self.empty_strikes
        last_seen = self.last_attempt if missing and self.last_visit is not None else self.last_visit
        return [last_seen, rate, self.value, self.gone_strikes + self.empty_strikes + self.refusals,
                self.template is not None, self.group,
                cost, low, high, self.not_before, self.links.to_json() if self.links is not None else None,
                self.own_full_bytes, self.redirected, self.depth, self.unlinked_since]

    @property
    def depth(self) -> int | None:
        """How many links from a start request the spider found the page (its stored request's ``depth``)."""
        depth = self.template["meta"].get("depth") if self.template else None
        return depth if type(depth) is int else None

    @property
    def own_full_bytes(self) -> float | None:
        """The page's own mean full fetch, once one was measured."""
        return self.full_bytes.mean if self.full_bytes is not None and self.full_bytes.count else None

    def to_json(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["stats"] = self.stats.to_json()
        data["estimate"] = [self.estimate.rate, self.estimate.low, self.estimate.high] if self.estimate else None
        data["links"] = self.links.to_json() if self.links is not None else None
        for name in ("full_bytes", "not_modified_bytes"):
            mean = getattr(self, name)
            data[name] = mean.to_json() if mean is not None else None
        return data

    @classmethod
    def from_json(cls, data: Any) -> PageState:
        """Rebuild a stored page; ``ValueError`` when the row is malformed."""
        if not isinstance(data, dict):
            raise ValueError("page record is not an object")
        try:
            fields = dict(data)
            fields["stats"] = ChangeStats.from_json(fields.get("stats", ChangeStats().to_json()))
            estimate = fields.get("estimate")
            fields["estimate"] = RateEstimate(*estimate) if estimate else None
            links = fields.get("links")
            fields["links"] = NewLinkStats.from_json(links) if links is not None else None
            for name in ("full_bytes", "not_modified_bytes"):
                mean = fields.get(name)
                fields[name] = MeanBytes.from_json(mean) if mean is not None else None
            if isinstance(fields.get("field_hashes"), dict):
                fields["field_hashes"] = [fields["field_hashes"]]
            return cls(**fields)
        except (TypeError, KeyError) as exc:
            raise ValueError(f"malformed page record: {exc}") from None


def stored_item(item: Any) -> dict[str, Any]:
    """*item*'s fields as ``COSTSCHED_STORE_RECORDS`` keeps them: JSON, with what JSON cannot hold as text
    (dates and times in ISO 8601, a set's elements sorted, so the same item is always stored the same).

    >>> import datetime
    >>> stored_item({"sku": "a", "at": datetime.date(2026, 1, 2), "tags": {"b", "a"}, "price": float("nan")})
    {'sku': 'a', 'at': '2026-01-02', 'tags': "{'a', 'b'}", 'price': 'nan'}

    Raises what :class:`~itemadapter.ItemAdapter` or a value's ``str()`` raises (``TypeError`` for an
    object that is not an item, ``RecursionError`` for one that contains itself).
    """
    return _json_safe(ItemAdapter(item).asdict())  # type: ignore[no-any-return]


def _json_safe(value: Any) -> Any:
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {key if isinstance(key, str) else str(key): _json_safe(inner) for key, inner in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(inner) for inner in value]
    if isinstance(value, (datetime.date, datetime.time)):  # datetimes too
        return value.isoformat()
    if isinstance(value, (set, frozenset)):  # iteration order depends on PYTHONHASHSEED
        return "{" + ", ".join(sorted(map(repr, value))) + "}" if value else "set()"
    return str(value)


class Summary(NamedTuple):
    """A page as planning sees it (the ``plan:`` row of the store).

    *last_seen* is when an answer last showed the page's state: its last visit, or
    the last of the 404 and 410 answers (or visits without the page's items) in a row since; ``None`` for a page never
    visited. *strikes* counts those answers (rows written before held the last
    visit, and whether the page was retired, read as one strike) and the attempts
    in a row refused before download. *cost* is the
    planned-cost override of the page's ``costsched_cost`` meta, if any;
    *rate_low* and *rate_high* bound the estimate's 90% interval; *links* is
    :meth:`NewLinkStats.to_json` of a page that links out; *full_bytes* the
    page's own mean full fetch; *redirected* whether its last answer came
    through a redirect; *depth* the ``depth`` of its stored request, which
    ``DEPTH_LIMIT`` applies to when it is re-issued; *unlinked* since when no
    link to it was seen (:attr:`PageState.unlinked_since`). Rows written by an older
    version are shorter; the missing fields take their defaults.
    """

    last_seen: float | None
    rate: float | None
    value: str | float
    strikes: int
    has_template: bool
    group: str
    cost: float | None = None
    rate_low: float | None = None
    rate_high: float | None = None
    not_before: float | None = None
    links: list[float] | None = None
    full_bytes: float | None = None
    redirected: bool = False
    depth: int | None = None
    unlinked: float | None = None

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Summary:
        return cls(*row[: len(cls._fields)])


def request_line(template: Any) -> str:
    """A stored request's method and body, which tell a form's pages apart; a long body is cut in the middle,
    as the field that differs (a page number) often comes last."""
    if not isinstance(template, dict):
        return "no template"
    body = str(template.get("body") or "")
    head = (BODY_SHOWN - 3) // 2
    shown = body if len(body) <= BODY_SHOWN else f"{body[:head]}...{body[-(BODY_SHOWN - 3 - head):]}"
    return f"{template.get('method')} {shown!r}" if body else str(template.get("method"))


def make_template(request: Request, spider: Spider) -> dict[str, Any] | None:
    """A JSON form of *request* that can be re-issued later, or ``None`` if it cannot be stored.

    Callbacks are stored by name (they must be methods of the spider), and the meta (all but
    what one download leaves in it), cb_kwargs and cookies must be JSON: a request re-issued
    without one of them would not be the spider's (its callback may need an item passed in
    the meta, the site a cookie that picks a currency).
    """
    try:
        data = request.to_dict(spider=spider)
    except ValueError:
        return None
    meta = {key: value for key, value in (data.get("meta") or {}).items()
            if key not in _TRANSIENT_META and not key.startswith("_")}
    try:
        meta, cb_kwargs, cookies = json.loads(
            json.dumps([meta, data.get("cb_kwargs") or {}, data.get("cookies") or {}], allow_nan=False))
    except (TypeError, ValueError):
        return None
    template: dict[str, Any] = {
        "url": data["url"],
        "method": data["method"],
        "callback": data.get("callback"),
        "errback": data.get("errback"),
        "meta": meta,
        "cb_kwargs": cb_kwargs,
        "priority": data.get("priority", 0),
        "headers": {
            key.decode("latin-1"): [v.decode("latin-1") for v in values]
            for key, values in (data.get("headers") or {}).items()
        },
        "body": (data.get("body") or b"").decode("latin-1"),
        "cookies": cookies,
        "encoding": data.get("encoding", "utf-8"),
        "cls": data.get("_class"),
    }
    return template


def moved_template(template: dict[str, Any], redirect: Request) -> dict[str, Any]:
    """*template* at the URL *redirect* took it to: the method, body and headers RedirectMiddleware kept, not
    the headers the downloader's middlewares added to the request before it was redirected (a session's
    ``Cookie``, validators), which are added again when it is re-issued. The cookies the spider set go with it
    on their host only: Scrapy's cookie jar kept them there, so the redirect to another host went without."""
    headers = {name: values for name, values in template["headers"].items() if name in redirect.headers}
    same_host = urlparse(template["url"]).hostname == urlparse(redirect.url).hostname
    return {**template, "url": redirect.url, "method": redirect.method, "body": redirect.body.decode("latin-1"),
            "headers": headers, "cookies": template.get("cookies") if same_host else {}}


def request_from_template(template: dict[str, Any], spider: Spider) -> Request:
    """The request a template stands for, bound to *spider*'s callbacks by name."""
    data: dict[str, Any] = {
        "url": template["url"],
        "method": template["method"],
        "callback": template["callback"],
        "errback": template["errback"],
        "meta": dict(template["meta"]),
        "cb_kwargs": dict(template["cb_kwargs"]),
        "priority": template["priority"],
        "headers": {k: [v.encode("latin-1") for v in vs] for k, vs in template["headers"].items()},
        "body": template["body"].encode("latin-1"),
        # Templates stored before these were kept have neither.
        "cookies": template.get("cookies") or {},
        "encoding": template.get("encoding", "utf-8"),
    }
    if template.get("cls"):
        data["_class"] = template["cls"]
    return request_from_dict(data, spider=spider)
