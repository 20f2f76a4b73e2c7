"""What the state keeps of session steps (``costsched_session``), read back whatever was stored."""

from __future__ import annotations

import scrapy
from scrapy.dupefilters import BaseDupeFilter

from scrapy_costsched.scheduler import PlannedVisitsPass
from scrapy_costsched.sessions import REMEMBERED_STEPS, SESSION_STEP_META, SessionSteps, shape_of


def _post(url: str, token: str) -> scrapy.Request:
    return scrapy.FormRequest(url, formdata={"token": token}, callback=_after_login)


def _after_login(response: object) -> None:
    """A callback (its name is part of a request's shape)."""


def test_a_log_in_post_with_a_new_token_has_the_shape_of_yesterdays() -> None:
    steps = SessionSteps()
    steps.saw(_post("https://example.com/login", "monday"))
    assert _post("https://example.com/login", "tuesday") in steps
    assert _post("https://example.com/account", "tuesday") not in steps
    assert scrapy.Request("https://example.com/login") not in steps  # a GET, and Scrapy's default callback
    assert shape_of(scrapy.Request("https://example.com/login")) == "GET https://example.com/login parse"


def test_steps_and_spend_survive_the_state_and_the_oldest_steps_are_forgotten() -> None:
    steps = SessionSteps()
    for n in range(REMEMBERED_STEPS + 5):
        steps.saw(scrapy.Request(f"https://example.com/token/{n}"))
    steps.spent = 3.0
    again = SessionSteps.from_state(steps.to_state())
    assert again.last_run_spent == 3.0
    assert again.spent == 0.0
    assert len(again.shapes) == REMEMBERED_STEPS
    assert scrapy.Request("https://example.com/token/4") not in again
    assert scrapy.Request(f"https://example.com/token/{REMEMBERED_STEPS + 4}") in again


def test_what_cannot_be_read_is_read_as_nothing_stored() -> None:
    stored: object
    for stored in (None, [], "x", {"shapes": "GET /", "spent": -1}, {"shapes": [1, None], "spent": True},
                   {"spent": float("nan")}, {"spent": "3"}):
        steps = SessionSteps.from_state(stored)
        assert (steps.shapes, steps.last_run_spent) == ({}, 0.0), stored
    assert SessionSteps.from_state({"shapes": ["GET / parse", 7], "spent": 2}).shapes == {"GET / parse": None}


class _RemembersEverything(BaseDupeFilter):
    """A filter that saw every request in an earlier run (``JOBDIR``'s ``requests.seen``)."""

    def request_seen(self, request: scrapy.Request) -> bool:
        return True


def test_a_session_step_passes_a_filter_that_remembers_earlier_runs_once_per_run() -> None:
    dupefilter = PlannedVisitsPass(_RemembersEverything(), lambda request: request.url)
    step = scrapy.Request("https://example.com/welcome", meta={SESSION_STEP_META: 7})
    assert not dupefilter.request_seen(step)
    assert dupefilter.request_seen(step.copy())  # again in the same run
    assert dupefilter.request_seen(scrapy.Request("https://example.com/page"))  # the rest as the filter says
