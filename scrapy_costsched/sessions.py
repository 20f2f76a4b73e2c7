"""Session steps: the requests that set up what a crawl's pages need (a log-in form and its POST, a consent
page, an API token), which a spider marks with the ``costsched_session`` meta key.

They are not pages: never recorded, planned or re-issued from a template (a log-in POST replayed with
yesterday's form token fails), but charged like any request. While one is under way the scheduler
re-issues no planned page, as those need the session: found on a trial with a members-only catalogue,
whose re-issued product pages went out before the log-in form was posted and were all redirected to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrapy import Request

#: Request meta a spider sets on each request that sets up the session.
SESSION_META = "costsched_session"
#: Set by the scheduler: the run's token of a session step it let out (kept through redirects and retries).
SESSION_STEP_META = "costsched_session_step"
#: Session steps remembered by shape (:func:`shape_of`), the latest: a page an earlier run recorded for one of them
#: (before the spider marked it) is not re-issued.
REMEMBERED_STEPS = 200


def shape_of(request: Request) -> str:
    """A request's method, URL and callback: what a session step has in common with the one of an earlier run
    (a log-in POST's body carries a new form token each time, so its fingerprint differs)."""
    callback = request.callback
    name = "parse" if callback is None else getattr(callback, "__name__", repr(callback))
    return f"{request.method} {request.url} {name}"


@dataclass
class SessionSteps:
    """The session steps a crawl has seen, and what the last run's cost (a plan leaves room for as much)."""

    shapes: dict[str, None] = field(default_factory=dict)
    """The shapes of the latest session steps, oldest first (a dict: looked up at every re-issue)."""
    last_run_spent: float = 0.0
    """What the session steps of the last run that closed were charged."""
    spent: float = 0.0
    """What this run's have been charged so far."""

    @classmethod
    def from_state(cls, stored: Any) -> SessionSteps:
        """As :meth:`to_state` wrote it; empty when nothing (or something unreadable) was stored."""
        if not isinstance(stored, dict):
            return cls()
        shapes = stored.get("shapes")
        shapes = [shape for shape in shapes if isinstance(shape, str)] if isinstance(shapes, list) else []
        spent = stored.get("spent")
        if isinstance(spent, bool) or not isinstance(spent, (int, float)) or not 0 <= spent < math.inf:
            spent = 0.0
        return cls(shapes=dict.fromkeys(shapes[-REMEMBERED_STEPS:]), last_run_spent=float(spent))

    def to_state(self) -> dict[str, Any]:
        """This run's steps and spend, for the next run."""
        return {"shapes": list(self.shapes), "spent": self.spent}

    def saw(self, request: Request) -> None:
        """*request*, a session step, goes out in this run."""
        shape = shape_of(request)
        self.shapes.pop(shape, None)
        self.shapes[shape] = None
        while len(self.shapes) > REMEMBERED_STEPS:
            del self.shapes[next(iter(self.shapes))]

    def __contains__(self, request: Request) -> bool:
        """Whether *request* has the shape of a session step."""
        return shape_of(request) in self.shapes
