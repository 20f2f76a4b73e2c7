from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest
from scrapy.settings import Settings

from scrapy_costsched.settings import DEFAULTS, Budget, Config, SettingError, parse_budget, parse_duration
from tests.helpers import DemoSite, crawl

if TYPE_CHECKING:
    from pathlib import Path

#: Every boolean setting, found by its default, so a new one is checked too.
BOOLEAN_SETTINGS = sorted(name for name, default in DEFAULTS.items() if isinstance(default, bool))


def config(**settings: object) -> Config:
    return Config.from_settings(Settings(settings))


def test_defaults_are_shadow_mode_with_request_billing() -> None:
    cfg = config()
    assert cfg.shadow
    assert cfg.billing == "requests"
    assert cfg.budget_period == 86400.0
    assert cfg.objective == "freshness"
    assert cfg.value_tiers["high"] > cfg.value_tiers["normal"] > cfg.value_tiers["low"]
    assert cfg.unlinked_periods == 0  # a page no page links to any more is kept, as without the add-on


@pytest.mark.parametrize(("value", "expected"), [(7, 7), ("7", 7), (7.0, 7), (0, 0), ("0", 0)])
def test_unlinked_periods_are_a_whole_number(value: object, expected: int) -> None:
    assert config(COSTSCHED_UNLINKED_PERIODS=value).unlinked_periods == expected


@pytest.mark.parametrize(("value", "expected"), [
    (40000, Budget(40000.0, "count")),
    ("40000", Budget(40000.0, "count")),
    ("40k", Budget(40000.0, "count")),
    ("2GB", Budget(2e9, "bytes")),
    ("500MB", Budget(5e8, "bytes")),
    ("1.5 GiB", Budget(1.5 * 1024**3, "bytes")),
    (None, None),
])
def test_budget_units(value: object, expected: Budget | None) -> None:
    assert parse_budget(value) == expected


@pytest.mark.parametrize("value", ["-5", 0, "lots", "2XB", True, float("inf")])
def test_bad_budget_is_one_clear_line(value: object) -> None:
    with pytest.raises(SettingError, match=r"^COSTSCHED_BUDGET \(.*\) is invalid: it must be a positive number"):
        config(COSTSCHED_BUDGET=value)


def test_bytes_budget_with_request_billing_names_both_settings() -> None:
    with pytest.raises(SettingError, match=r"COSTSCHED_BUDGET .* COSTSCHED_BILLING is 'requests'"):
        config(COSTSCHED_BUDGET="2GB")


@pytest.mark.parametrize(("value", "seconds"), [("1d", 86400.0), ("12h", 43200.0), ("30m", 1800.0),
                                                ("1w", 604800.0), (3600, 3600.0)])
def test_durations(value: object, seconds: float) -> None:
    assert parse_duration("COSTSCHED_BUDGET_PERIOD", value) == seconds


@pytest.mark.parametrize(("name", "value", "match"), [
    ("COSTSCHED_BUDGET_PERIOD", "1 fortnight", "COSTSCHED_BUDGET_PERIOD"),
    ("COSTSCHED_BUDGET_PERIOD", -1, "COSTSCHED_BUDGET_PERIOD"),
    ("COSTSCHED_OBJECTIVE", "speed", "COSTSCHED_OBJECTIVE \\('speed'\\) is invalid: it must be 'freshness' or"),
    ("COSTSCHED_VERIFY_SHARE", 1.5, "COSTSCHED_VERIFY_SHARE \\(1.5\\) is invalid: it must be a number from 0 to 1"),
    ("COSTSCHED_CONDITIONAL", "maybe", "COSTSCHED_CONDITIONAL"),
    ("COSTSCHED_BILLING", "free", "COSTSCHED_BILLING"),
    ("COSTSCHED_RESERVE_DISCOVERY", 1.5, "COSTSCHED_RESERVE_DISCOVERY"),
    ("COSTSCHED_RESERVE_DISCOVERY", "x", "COSTSCHED_RESERVE_DISCOVERY"),
    ("COSTSCHED_VALUE_TIERS", {"high": -1}, "COSTSCHED_VALUE_TIERS"),
    ("COSTSCHED_VALUE_TIERS", [], "COSTSCHED_VALUE_TIERS"),
    ("COSTSCHED_DEFAULT_VALUE", "gold", "COSTSCHED_DEFAULT_VALUE"),
    ("COSTSCHED_HASH_FIELDS", "price", "COSTSCHED_HASH_FIELDS"),
    ("COSTSCHED_IGNORE_FIELDS", {"Product": "ts"}, "COSTSCHED_IGNORE_FIELDS"),
    ("COSTSCHED_ITEM_KEY", 5, "COSTSCHED_ITEM_KEY"),
    ("COSTSCHED_CLOCK", "no.such.clock", "COSTSCHED_CLOCK"),
    ("COSTSCHED_CLOCK", "os.getcwd", "COSTSCHED_CLOCK"),
    ("COSTSCHED_COMMIT_EVERY", 0, "COSTSCHED_COMMIT_EVERY"),
    ("COSTSCHED_COMMIT_INTERVAL", "often", "COSTSCHED_COMMIT_INTERVAL"),
    ("COSTSCHED_STATE", "redis://localhost", "COSTSCHED_STATE"),
    ("COSTSCHED_STATE", "/var/crawls/%(name)s-%(time)s.sqlite",
     (r"COSTSCHED_STATE .* is invalid: it must be a path whose placeholders are %\(name\)s, the spider's name, and "
      r"its attributes \(not %\(time\)s\): a state is the same file at every run")),
    ("COSTSCHED_BILLED_STATUSES", ["2xx"], "COSTSCHED_BILLED_STATUSES"),
    ("COSTSCHED_BILLED_STATUSES", ["399-200"], "COSTSCHED_BILLED_STATUSES"),
    ("COSTSCHED_BILLED_STATUSES", {"a": 1}, "COSTSCHED_BILLED_STATUSES"),
    ("COSTSCHED_REQUEST_OVERHEAD", -1, "COSTSCHED_REQUEST_OVERHEAD"),
    ("COSTSCHED_REQUEST_OVERHEAD", "2 parsecs", "COSTSCHED_REQUEST_OVERHEAD"),
    ("COSTSCHED_RENDER_FACTOR", 0.5, "COSTSCHED_RENDER_FACTOR"),
    ("COSTSCHED_MAXSIZE", {"product": 0}, "COSTSCHED_MAXSIZE"),
    ("COSTSCHED_MAXSIZE", ["product"], "COSTSCHED_MAXSIZE"),
    ("COSTSCHED_MAX_RETRY_AFTER", -5, "COSTSCHED_MAX_RETRY_AFTER"),
    ("COSTSCHED_BLOCK_WAIT", "soon", "COSTSCHED_BLOCK_WAIT"),
    ("COSTSCHED_UNLINKED_PERIODS", -1, "COSTSCHED_UNLINKED_PERIODS"),
    ("COSTSCHED_UNLINKED_PERIODS", 2.5, "COSTSCHED_UNLINKED_PERIODS"),
    ("COSTSCHED_UNLINKED_PERIODS", "a week", "COSTSCHED_UNLINKED_PERIODS"),
    ("COSTSCHED_UNLINKED_PERIODS", True, "COSTSCHED_UNLINKED_PERIODS"),
])
def test_every_bad_setting_stops_with_its_name(name: str, value: object, match: str) -> None:
    with pytest.raises(SettingError, match=match) as info:
        config(**{name: value})
    assert "\n" not in str(info.value)


def test_the_boolean_settings_are_known() -> None:
    assert BOOLEAN_SETTINGS == ["COSTSCHED_CONDITIONAL", "COSTSCHED_DELIVER_NOT_MODIFIED", "COSTSCHED_DROP_UNCHANGED",
                                "COSTSCHED_ENABLED", "COSTSCHED_HEALTH", "COSTSCHED_STORE_RECORDS"]


@pytest.mark.parametrize("name", BOOLEAN_SETTINGS)
@pytest.mark.parametrize("value", ["maybe", "yes", "", [1], {"on": True}])
def test_a_bad_boolean_setting_is_one_line_naming_it(name: str, value: object) -> None:
    expected = rf"^{name} \({re.escape(repr(value))}\) is invalid: it must be True or False \(also 'true'/'false', 1/0"
    with pytest.raises(SettingError, match=expected) as info:
        config(**{name: value})
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name", BOOLEAN_SETTINGS)
@pytest.mark.parametrize(("value", "expected"), [(True, True), (False, False), ("true", True), ("False", False),
                                                 ("1", True), ("0", False), (1, True), (0, False)])
def test_boolean_settings_accept_what_scrapy_accepts(name: str, value: object, expected: bool) -> None:
    assert Settings({name: value}).getbool(name) is expected  # Scrapy's own reading of the value
    cfg = config(**{name: value})
    assert getattr(cfg, name.removeprefix("COSTSCHED_").lower()) is expected


def test_command_line_json_values_are_accepted() -> None:
    cfg = config(COSTSCHED_HASH_FIELDS='{"Product": ["price", "stock"]}', COSTSCHED_ITEM_KEY="sku",
                 COSTSCHED_VALUE_TIERS='{"a": 1, "b": 3}', COSTSCHED_DEFAULT_VALUE="a")
    assert cfg.hash_fields == {"Product": ("price", "stock")}
    assert cfg.item_key == {"*": "sku"}
    assert cfg.value_tiers == {"a": 1.0, "b": 3.0}


def test_clock_is_called_through_the_dotted_path() -> None:
    cfg = config(COSTSCHED_CLOCK="time.monotonic")
    assert isinstance(cfg.clock(), float)


def test_billing_models_charge_what_their_plan_says() -> None:
    from scrapy_costsched.billing import CreditsBilling, RequestsBilling

    per_request, per_credit = RequestsBilling(), CreditsBilling()
    assert [per_request.attempt_cost(s, 0) for s in (200, 404, 503, None)] == [1.0, 1.0, 1.0, 1.0]
    assert [per_credit.attempt_cost(s, 0) for s in (200, 304, 404, 503, None)] == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert per_request.expected_cost(None) == per_credit.expected_cost(None) == 1.0
    assert (per_request.unit, per_credit.unit) == ("requests", "credits")


# -- a bad setting stops a real crawl with one line ------------------------------------------------


@pytest.mark.parametrize(("name", "value"), [("COSTSCHED_BUDGET", "lots"), ("COSTSCHED_DROP_UNCHANGED", "maybe"),
                                             ("COSTSCHED_ENABLED", "maybe")])
def test_a_bad_setting_stops_the_crawl_with_one_line_and_no_traceback(
        tiny_shop: DemoSite, tmp_path: Path, name: str, value: str) -> None:
    result = crawl(tiny_shop, tmp_path, settings={name: value})
    assert result.returncode != 0
    mentions = [line for line in result.log.splitlines() if value in line]
    assert len(mentions) == 1, result.log[-5000:]
    assert re.search(rf"(CRITICAL|ERROR): {name} \('{value}'\) is invalid: it must be ", mentions[0])
    assert "Traceback" not in result.log, result.log[-5000:]
    assert result.stats.get("downloader/request_count", 0) == 0


def test_bandwidth_billing_takes_a_budget_in_bytes() -> None:
    assert config(COSTSCHED_BILLING="bandwidth", COSTSCHED_BUDGET="500MB").budget == Budget(5e8, "bytes")


def test_billed_statuses_read_numbers_and_ranges() -> None:
    assert config(COSTSCHED_BILLED_STATUSES=[200, "300-302", "404"]).billed_statuses == {200, 300, 301, 302, 404}
    assert config(COSTSCHED_BILLED_STATUSES='["200-299"]').billed_statuses == set(range(200, 300))  # -s on the CLI
    assert config().billed_statuses == set(range(200, 400))


def test_byte_sizes_take_units() -> None:
    settings = config(COSTSCHED_REQUEST_OVERHEAD="1.5kB", COSTSCHED_MAXSIZE={"product": "2MiB", "hub": 5000})
    assert settings.request_overhead == 1500.0
    assert settings.max_sizes == {"product": 2 * 1024**2, "hub": 5000}
    assert config(COSTSCHED_REQUEST_OVERHEAD=0).request_overhead == 0.0
