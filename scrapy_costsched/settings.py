"""Every ``COSTSCHED_*`` setting: defaults, parsing and validation in one place.

:class:`Config.from_settings` reads the settings once, when the crawl opens, and
stops it with one line naming the setting, the value and what is accepted.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scrapy.utils.misc import load_object

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from scrapy.settings import BaseSettings
    from typing_extensions import Self

#: Defaults, alphabetical after the switch. A plugin cannot extend Scrapy's
#: default settings, so every read goes through this table.
DEFAULTS: dict[str, Any] = {
    "COSTSCHED_ENABLED": True,
    "COSTSCHED_BILLING": "requests",
    "COSTSCHED_BILLED_STATUSES": ["200-399"],
    "COSTSCHED_BLOCK_WAIT": "60s",
    "COSTSCHED_BUDGET": None,
    "COSTSCHED_BUDGET_PERIOD": "1d",
    "COSTSCHED_CLOCK": "time.time",
    "COSTSCHED_COMMIT_EVERY": 50,
    "COSTSCHED_COMMIT_INTERVAL": "10s",
    "COSTSCHED_CONDITIONAL": True,
    "COSTSCHED_DEFAULT_VALUE": "normal",
    "COSTSCHED_DELIVER_NOT_MODIFIED": False,
    "COSTSCHED_DROP_UNCHANGED": False,
    "COSTSCHED_FALLBACK_SCHEDULER": "scrapy.core.scheduler.Scheduler",
    "COSTSCHED_HASH_FIELDS": {},
    "COSTSCHED_HEALTH": True,
    "COSTSCHED_HISTORY_HALF_LIFE": "180d",
    "COSTSCHED_IGNORE_FIELDS": {},
    "COSTSCHED_ITEM_KEY": None,
    "COSTSCHED_LOG_INTERVAL": "60s",
    "COSTSCHED_MAX_RETRY_AFTER": "1h",
    "COSTSCHED_MAXSIZE": {},
    "COSTSCHED_OBJECTIVE": "freshness",
    "COSTSCHED_RENDER_FACTOR": 10.0,
    "COSTSCHED_REQUEST_OVERHEAD": 0,
    "COSTSCHED_RESERVE_DISCOVERY": 0.1,
    "COSTSCHED_STATE": None,
    "COSTSCHED_STORE_RECORDS": False,
    "COSTSCHED_UNLINKED_PERIODS": 0,
    "COSTSCHED_VALUE_TIERS": {"low": 0.25, "normal": 1.0, "high": 4.0, "critical": 16.0},
    "COSTSCHED_VERIFY_SHARE": 0.1,
}

BILLING_MODELS = {
    "requests": "scrapy_costsched.billing.RequestsBilling",
    "credits": "scrapy_costsched.billing.CreditsBilling",
    "bandwidth": "scrapy_costsched.billing.BandwidthBilling",
}
OBJECTIVES = ("freshness", "changes")

_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_BYTE_UNITS = {
    "b": 1.0,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "tb": 1e12,
    "kib": 1024.0,
    "mib": 1024.0**2,
    "gib": 1024.0**3,
    "tib": 1024.0**4,
}
_COUNT_UNITS = {"": 1.0, "k": 1e3, "m": 1e6}
_QUANTITY = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")
#: A ``%(key)s`` placeholder in ``COSTSCHED_STATE``, as Scrapy's ``FEEDS`` URIs have them: ``%(name)s`` (the
#: spider's name) or another of the spider's attributes (a ``-a`` argument).
STATE_PLACEHOLDER = re.compile(r"%\((\w*)\)s")
#: ``FEEDS`` placeholders a state path may not hold: a state is the same file at every run.
_PER_RUN_PLACEHOLDERS = frozenset({"time", "batch_time", "batch_id"})


class SettingError(ValueError):
    """A ``COSTSCHED_*`` setting has a value the add-on cannot use."""


def _invalid(name: str, value: Any, accepted: str) -> SettingError:
    return SettingError(f"{name} ({value!r}) is invalid: it must be {accepted}.")


def get_bool(settings: BaseSettings, name: str) -> bool:
    """A boolean setting, read as Scrapy's ``getbool`` reads it, but refused with the setting's name."""
    try:
        return settings.getbool(name, DEFAULTS[name])
    except (TypeError, ValueError):
        raise _invalid(name, settings.get(name), "True or False (also 'true'/'false', 1/0 or '1'/'0')") from None


def parse_duration(name: str, value: Any) -> float:
    """Seconds in *value*: a positive number of seconds or a string such as ``"1d"``, ``"12h"``."""
    accepted = 'a positive number of seconds or a string like "30m", "12h", "1d", "1w"'
    if isinstance(value, bool):
        raise _invalid(name, value, accepted)
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str) and (match := _QUANTITY.match(value)):
        unit = match.group(2).lower() or "s"
        if unit not in _DURATION_UNITS:
            raise _invalid(name, value, accepted)
        seconds = float(match.group(1)) * _DURATION_UNITS[unit]
    else:
        raise _invalid(name, value, accepted)
    if not math.isfinite(seconds) or seconds <= 0:
        raise _invalid(name, value, accepted)
    return seconds


def format_duration(seconds: float) -> str:
    """*seconds* as :func:`parse_duration` reads it back, in the largest unit that divides it.

    >>> format_duration(43200.0), format_duration(86400.0), format_duration(90.0), format_duration(0.5)
    ('12h', '1d', '90s', '0.5s')
    """
    for unit, size in sorted(_DURATION_UNITS.items(), key=lambda pair: -pair[1]):
        if seconds >= size and (seconds / size).is_integer():
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


@dataclass(frozen=True)
class Budget:
    """An amount per budget period, in the billing model's unit (``bytes`` or ``count``)."""

    amount: float
    kind: str


def parse_budget(value: Any) -> Budget | None:
    """Read ``COSTSCHED_BUDGET``: a number, ``"40000"``, ``"40k"``, ``"2GB"``, ``"500MiB"``; unset is shadow mode."""
    name = "COSTSCHED_BUDGET"
    accepted = 'a positive number or a string like "40000", "40k", "500MB", "2GB" (unset for shadow mode)'
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise _invalid(name, value, accepted)
    if isinstance(value, (int, float)):
        budget = Budget(float(value), "count")
    elif isinstance(value, str) and (match := _QUANTITY.match(value)):
        number, unit = float(match.group(1)), match.group(2).lower()
        if unit in _COUNT_UNITS and unit != "m":
            budget = Budget(number * _COUNT_UNITS[unit], "count")
        elif unit in _BYTE_UNITS:
            budget = Budget(number * _BYTE_UNITS[unit], "bytes")
        else:
            raise _invalid(name, value, accepted)
    else:
        raise _invalid(name, value, accepted)
    if not math.isfinite(budget.amount) or budget.amount <= 0:
        raise _invalid(name, value, accepted)
    return budget


def _fields_per_type(name: str, value: Any) -> dict[str, tuple[str, ...]]:
    """``["a", "b"]`` (every item type) or ``{"Product": ["a"], "*": ["b"]}``."""
    accepted = 'a list of field names, or a dict mapping item class names (or "*") to such lists'
    value = _maybe_json(value)
    if isinstance(value, (list, tuple)):
        value = {"*": value}
    if not isinstance(value, dict):
        raise _invalid(name, value, accepted)
    result: dict[str, tuple[str, ...]] = {}
    for type_name, fields in value.items():
        if not isinstance(type_name, str) or not isinstance(fields, (list, tuple)):
            raise _invalid(name, value, accepted)
        if not all(isinstance(f, str) for f in fields):
            raise _invalid(name, value, accepted)
        result[type_name] = tuple(fields)
    return result


def _item_key(value: Any) -> dict[str, str]:
    name, accepted = "COSTSCHED_ITEM_KEY", 'a field name, or a dict mapping item class names (or "*") to field names'
    value = _maybe_json(value)
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        return {"*": value}
    if isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return dict(value)
    raise _invalid(name, value, accepted)


def _maybe_json(value: Any) -> Any:
    """Command-line overrides (``-s NAME=...``) arrive as strings; accept JSON there."""
    if isinstance(value, str) and value.strip()[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _value_tiers(value: Any) -> dict[str, float]:
    name, accepted = "COSTSCHED_VALUE_TIERS", "a dict mapping tier names to positive numbers"
    value = _maybe_json(value)
    if not isinstance(value, dict) or not value:
        raise _invalid(name, value, accepted)
    tiers: dict[str, float] = {}
    for tier, weight in value.items():
        if not isinstance(tier, str) or isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise _invalid(name, value, accepted)
        if not math.isfinite(weight) or weight <= 0:
            raise _invalid(name, value, accepted)
        tiers[tier] = float(weight)
    return tiers


def _fraction(settings: BaseSettings, name: str, *, up_to_one: bool = False) -> float:
    """A number from 0 up to 1, 1 itself included only when *up_to_one*."""
    accepted = "a number from 0 to 1" if up_to_one else "a number from 0 up to (not including) 1"
    value = settings.get(name, DEFAULTS[name])
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise _invalid(name, value, accepted) from None
    if not (0.0 <= number <= 1.0 if up_to_one else 0.0 <= number < 1.0):
        raise _invalid(name, value, accepted)
    return number


def billed_statuses(value: Any) -> frozenset[int]:
    """``COSTSCHED_BILLED_STATUSES``: HTTP statuses and ranges (``[200, "300-399", 404]``) a credit is paid for."""
    name, accepted = "COSTSCHED_BILLED_STATUSES", 'a list of HTTP statuses and ranges such as [200, "300-399", 404]'
    value = _maybe_json(value)
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, (list, tuple, set, frozenset)):
        raise _invalid(name, value, accepted)
    statuses: set[int] = set()
    for entry in value:
        match = re.fullmatch(r"\s*(\d{3})\s*(?:-\s*(\d{3})\s*)?", str(entry)) if not isinstance(entry, bool) else None
        if match is None:
            raise _invalid(name, value, accepted)
        low, high = int(match.group(1)), int(match.group(2) or match.group(1))
        if not 100 <= low <= high <= 599:
            raise _invalid(name, value, accepted)
        statuses.update(range(low, high + 1))
    return frozenset(statuses)


def _byte_size(name: str, value: Any, *, zero: bool = False) -> float:
    """A number of bytes: a number or a string with a unit (``"1.5kB"``, ``"10MB"``)."""
    accepted = ('a number of bytes' + (' (0 or more)' if zero else ' above 0')
                + ' or a string like "600B", "2kB", "10MB"')
    if isinstance(value, bool):
        raise _invalid(name, value, accepted)
    if isinstance(value, (int, float)):
        size = float(value)
    elif isinstance(value, str) and (match := _QUANTITY.match(value)) \
            and (unit := match.group(2).lower() or "b") in _BYTE_UNITS:
        size = float(match.group(1)) * _BYTE_UNITS[unit]
    else:
        raise _invalid(name, value, accepted)
    if not math.isfinite(size) or size < 0 or (size == 0 and not zero):
        raise _invalid(name, value, accepted)
    return size


def _max_sizes(value: Any) -> dict[str, int]:
    """``COSTSCHED_MAXSIZE``: the largest response each page type may download (``{"product": "2MB"}``)."""
    name, accepted = "COSTSCHED_MAXSIZE", 'a dict mapping page types to sizes, such as {"product": "2MB"}'
    value = _maybe_json(value)
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise _invalid(name, value, accepted)
    return {page_type: int(_byte_size(name, size)) for page_type, size in value.items()}


def _factor(settings: BaseSettings, name: str) -> float:
    """A number of 1 or more."""
    value = settings.get(name, DEFAULTS[name])
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise _invalid(name, value, "a number of 1 or more") from None
    if isinstance(value, bool) or not math.isfinite(number) or number < 1:
        raise _invalid(name, value, "a number of 1 or more")
    return number


def _clock(value: Any) -> Callable[[], float]:
    name, accepted = "COSTSCHED_CLOCK", "a dotted path to a zero-argument callable returning epoch seconds"
    try:
        clock = load_object(value) if isinstance(value, str) else value
    except (ImportError, NameError, ValueError, AttributeError):
        raise _invalid(name, value, accepted) from None
    if not callable(clock):
        raise _invalid(name, value, accepted)
    try:
        now = clock()
    except Exception as exc:  # noqa: BLE001 - any failure of a user callable is reported the same way
        raise SettingError(f"COSTSCHED_CLOCK ({value!r}) failed when called: {exc!r}.") from None
    if isinstance(now, bool) or not isinstance(now, (int, float)) or not math.isfinite(now):
        raise _invalid(name, value, accepted + f" (it returned {now!r})")
    return clock  # type: ignore[no-any-return]


def resolve_value(value: Any, tiers: Mapping[str, float]) -> float | None:
    """The numeric value of a page: a positive number, or the weight of a named tier; ``None`` if invalid."""
    if isinstance(value, str):
        return tiers.get(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) and number > 0 else None


@dataclass(frozen=True)
class Config:
    """The validated ``COSTSCHED_*`` settings of one crawl."""

    enabled: bool
    billing: str
    budget: Budget | None
    budget_period: float
    clock: Callable[[], float]
    commit_every: int
    default_value: str | float
    drop_unchanged: bool
    fallback_scheduler: str
    hash_fields: dict[str, tuple[str, ...]]
    history_half_life: float
    ignore_fields: dict[str, tuple[str, ...]]
    item_key: dict[str, str]
    objective: str
    reserve_discovery: float
    state: str | None
    value_tiers: dict[str, float] = field(default_factory=dict)
    conditional: bool = True
    deliver_not_modified: bool = False
    verify_share: float = 0.1
    health: bool = True
    max_retry_after: float = 3600.0
    block_wait: float = 60.0
    request_overhead: float = 0.0
    render_factor: float = 10.0
    max_sizes: dict[str, int] = field(default_factory=dict)
    billed_statuses: frozenset[int] = frozenset(range(200, 400))
    log_interval: float = 60.0
    """Seconds between progress lines in the log; 0 for none."""
    commit_interval: float = 10.0
    """Seconds of crawling after which an observation commits the batch however small; 0 for none."""
    store_records: bool = False
    unlinked_periods: int = 0
    """Budget periods a page may go without a request for it, once a page stopped linking to it, before plans leave
    it out; 0 for never."""

    @property
    def shadow(self) -> bool:
        """No budget: every request goes out, observations are only recorded."""
        return self.budget is None

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> Self:
        def get(name: str) -> Any:
            return settings.get(name, DEFAULTS[name])

        billing = get("COSTSCHED_BILLING")
        if not isinstance(billing, str) or not billing:
            raise _invalid("COSTSCHED_BILLING", billing, "'requests', 'credits', 'bandwidth' or a dotted path to a billing class")
        if billing not in BILLING_MODELS and "." not in billing:
            raise _invalid("COSTSCHED_BILLING", billing, "'requests', 'credits', 'bandwidth' or a dotted path to a billing class")
        budget = parse_budget(get("COSTSCHED_BUDGET"))
        if budget is not None and budget.kind == "bytes" and billing in ("requests", "credits"):
            raise SettingError(
                f"COSTSCHED_BUDGET ({get('COSTSCHED_BUDGET')!r}) is an amount of bytes but COSTSCHED_BILLING is "
                f"{billing!r}, which counts {billing}; give a plain number."
            )
        objective = get("COSTSCHED_OBJECTIVE")
        if objective not in OBJECTIVES:
            raise _invalid("COSTSCHED_OBJECTIVE", objective, " or ".join(repr(o) for o in OBJECTIVES))
        commit_every = get("COSTSCHED_COMMIT_EVERY")
        try:
            commit_every = int(commit_every)
        except (TypeError, ValueError):
            raise _invalid("COSTSCHED_COMMIT_EVERY", commit_every, "a positive integer") from None
        if commit_every < 1:
            raise _invalid("COSTSCHED_COMMIT_EVERY", commit_every, "a positive integer")
        tiers = _value_tiers(get("COSTSCHED_VALUE_TIERS"))
        default_value = _maybe_number(get("COSTSCHED_DEFAULT_VALUE"))
        if resolve_value(default_value, tiers) is None:
            raise _invalid("COSTSCHED_DEFAULT_VALUE", default_value, "a positive number or a tier name of COSTSCHED_VALUE_TIERS")
        state = get("COSTSCHED_STATE")
        if state is not None and (not isinstance(state, str) or not state):
            raise _invalid("COSTSCHED_STATE", state, "a file path or a sqlite:///path URI")
        per_run = sorted({f"%({name})s" for name in STATE_PLACEHOLDER.findall(state or "")
                          if name in _PER_RUN_PLACEHOLDERS or not name})
        if per_run:
            raise _invalid("COSTSCHED_STATE", state, "a path whose placeholders are %(name)s, the spider's name, and "
                           f"its attributes (not {', '.join(per_run)}): a state is the same file at every run")
        if isinstance(state, str) and state.startswith("redis://"):
            raise SettingError(
                f"COSTSCHED_STATE ({state!r}): the Redis store is not available in this version; "
                "use a file path or sqlite:///path."
            )
        return cls(
            enabled=get_bool(settings, "COSTSCHED_ENABLED"),
            billing=billing,
            budget=budget,
            budget_period=parse_duration("COSTSCHED_BUDGET_PERIOD", get("COSTSCHED_BUDGET_PERIOD")),
            clock=_clock(get("COSTSCHED_CLOCK")),
            commit_every=commit_every,
            default_value=default_value,
            drop_unchanged=get_bool(settings, "COSTSCHED_DROP_UNCHANGED"),
            fallback_scheduler=str(get("COSTSCHED_FALLBACK_SCHEDULER")),
            hash_fields=_fields_per_type("COSTSCHED_HASH_FIELDS", get("COSTSCHED_HASH_FIELDS")),
            history_half_life=parse_duration("COSTSCHED_HISTORY_HALF_LIFE", get("COSTSCHED_HISTORY_HALF_LIFE")),
            ignore_fields=_fields_per_type("COSTSCHED_IGNORE_FIELDS", get("COSTSCHED_IGNORE_FIELDS")),
            item_key=_item_key(get("COSTSCHED_ITEM_KEY")),
            objective=objective,
            reserve_discovery=_fraction(settings, "COSTSCHED_RESERVE_DISCOVERY"),
            state=state,
            value_tiers=tiers,
            conditional=get_bool(settings, "COSTSCHED_CONDITIONAL"),
            deliver_not_modified=get_bool(settings, "COSTSCHED_DELIVER_NOT_MODIFIED"),
            verify_share=_fraction(settings, "COSTSCHED_VERIFY_SHARE", up_to_one=True),
            health=get_bool(settings, "COSTSCHED_HEALTH"),
            max_retry_after=parse_duration("COSTSCHED_MAX_RETRY_AFTER", get("COSTSCHED_MAX_RETRY_AFTER")),
            block_wait=parse_duration("COSTSCHED_BLOCK_WAIT", get("COSTSCHED_BLOCK_WAIT")),
            request_overhead=_byte_size("COSTSCHED_REQUEST_OVERHEAD", get("COSTSCHED_REQUEST_OVERHEAD"), zero=True),
            render_factor=_factor(settings, "COSTSCHED_RENDER_FACTOR"),
            max_sizes=_max_sizes(get("COSTSCHED_MAXSIZE")),
            billed_statuses=billed_statuses(get("COSTSCHED_BILLED_STATUSES")),
            log_interval=_interval("COSTSCHED_LOG_INTERVAL", get("COSTSCHED_LOG_INTERVAL")),
            commit_interval=_interval("COSTSCHED_COMMIT_INTERVAL", get("COSTSCHED_COMMIT_INTERVAL")),
            store_records=get_bool(settings, "COSTSCHED_STORE_RECORDS"),
            unlinked_periods=_periods("COSTSCHED_UNLINKED_PERIODS", get("COSTSCHED_UNLINKED_PERIODS")),
        )


def _periods(name: str, value: Any) -> int:
    """A whole number of budget periods, 0 or more (from the command line, a string)."""
    try:
        periods = int(value)
    except (TypeError, ValueError, OverflowError):
        periods = -1
    if isinstance(value, bool) or periods < 0 or (isinstance(value, float) and value != periods):
        raise _invalid(name, value, "a whole number of budget periods, 0 for never")
    return periods


def _interval(name: str, value: Any) -> float:
    """A duration, or 0 (or ``None``) for never."""
    if value is None or (not isinstance(value, bool) and value in (0, "0")):
        return 0.0
    return parse_duration(name, value)


def _maybe_number(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value
