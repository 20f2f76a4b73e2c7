"""The one clock shared by the demo site, the crawler and the demo driver.

The driver freezes simulated time by writing epoch seconds to the file named by
``DEMO_CLOCK_FILE``; the server and ``COSTSCHED_CLOCK`` both read it, so many simulated days run
in seconds and the site's content and the scheduler's notion of "now" never disagree.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

CLOCK_ENV = "DEMO_CLOCK_FILE"


def now() -> float:
    """Current time as epoch seconds: the clock file's value if set, else the wall clock."""
    path = os.environ.get(CLOCK_ENV)
    if not path:
        return time.time()
    text = Path(path).read_text(encoding="ascii").strip()
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{CLOCK_ENV} file {path!r} holds {text!r}, expected epoch seconds") from None


def set_clock(path: str | os.PathLike[str], t: float) -> None:
    """Write *t* to the clock file atomically, so a reader never sees a half-written number."""
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(repr(float(t)), encoding="ascii")
    tmp.replace(target)
