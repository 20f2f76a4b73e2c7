"""``COSTSCHED_CLOCK = "news.clock.now"``: the time the test site shows.

The tests move the site through simulated days by writing epoch seconds to the file named by
``DEMO_CLOCK_FILE`` (as the demo's ``demo_site.clock`` does); the crawler reads the same file, so
the site and the scheduler agree on "now". Without the variable this is the wall clock.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def now() -> float:
    path = os.environ.get("DEMO_CLOCK_FILE")
    if not path:
        return time.time()
    return float(Path(path).read_text(encoding="ascii"))
