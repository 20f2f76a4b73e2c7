"""Billing models: what one download attempt costs, in the unit the budget is given in.

The scheduler plans with :meth:`BillingModel.expected_cost` and the tracker charges
the ledger with :meth:`BillingModel.attempt_cost` for every attempt that left the
downloader (retries and redirects included), so plans and bills use one unit.
``COSTSCHED_BILLING`` names a model here or gives a dotted path to your own class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from scrapy_costsched.settings import DEFAULTS, billed_statuses

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from typing_extensions import Self


DEFAULT_BILLED = frozenset(range(200, 400))
#: The optional attribute of a billing model that makes a page's ``costsched_cost`` its price per billed attempt.
BILLS_EXPLICIT_PRICES = "bills_explicit_prices"


@runtime_checkable
class BillingModel(Protocol):
    """How visits are paid for.

    *unit* names what the budget counts (``"requests"``, ``"credits"``, ``"bytes"``).
    ``expected_cost`` is the planned cost of one visit before it is made, given the
    page's learned mean cost of a visit (``None`` when nothing is known yet).
    ``attempt_cost`` is what one download attempt actually cost: *status* is the
    HTTP status, or ``None`` when the attempt failed without a response; *size* is
    the bytes it moved (:mod:`~scrapy_costsched.metering`: request and response,
    headers included, body as transferred, plus ``COSTSCHED_REQUEST_OVERHEAD``; a
    rendered page's times ``COSTSCHED_RENDER_FACTOR``).

    A model may also set ``bills_explicit_prices = True`` (:data:`BILLS_EXPLICIT_PRICES`) when what it
    bills cannot be seen from the wire, as an API's credits: each attempt it bills is then charged the
    page's ``costsched_cost`` where the spider gives one.
    """

    unit: str

    def expected_cost(self, learned_cost: float | None) -> float: ...

    def attempt_cost(self, status: int | None, size: int) -> float: ...


class RequestsBilling:
    """Every attempt that reaches the network costs one request, whatever its outcome."""

    unit = "requests"

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls()

    def expected_cost(self, learned_cost: float | None) -> float:
        return 1.0

    def attempt_cost(self, status: int | None, size: int) -> float:
        return 1.0


class CreditsBilling(RequestsBilling):
    """A scraping API: a successful response costs one credit; failures and target errors are free.

    Which statuses are paid for is ``COSTSCHED_BILLED_STATUSES`` (default 200-399; some
    APIs also bill a 404 or not a 304). As in the seed article's Web Scraping API
    example, rendering does not change the price, so a visit is planned at one credit;
    an API that prices calls differently is told by the page's ``costsched_cost``, which
    is charged for each billed answer of that page.
    """

    unit = "credits"
    bills_explicit_prices = True

    def __init__(self, billed: frozenset[int] = DEFAULT_BILLED) -> None:
        self.billed = billed

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        name = "COSTSCHED_BILLED_STATUSES"
        return cls(billed_statuses(crawler.settings.get(name, DEFAULTS[name])))

    def attempt_cost(self, status: int | None, size: int) -> float:
        return 1.0 if status in self.billed else 0.0


class BandwidthBilling(RequestsBilling):
    """A proxy billed per byte: every attempt costs the bytes it moved, failed ones included.

    A visit is planned at the learned mean of its host and page type's full
    fetches (and of their 304s, where validators are sent); a page of a kind
    never fetched is planned at :attr:`prior_bytes` until one is.
    """

    unit = "bytes"
    #: What a visit of a page of a kind never fetched is planned at (a typical HTML page).
    prior_bytes = 64_000.0

    def expected_cost(self, learned_cost: float | None) -> float:
        return learned_cost if learned_cost is not None else self.prior_bytes

    def attempt_cost(self, status: int | None, size: int) -> float:
        return float(size)
