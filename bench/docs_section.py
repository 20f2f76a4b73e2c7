"""Write a bench script's generated text between its marker comments in a Markdown file.

A section named ``sim_results`` lives between ``<!-- sim_results:begin -->`` and
``<!-- sim_results:end -->``; everything outside the markers is left as it is, so the
prose around a table stays hand-written while the numbers come from the script.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def read_section(path: Path, name: str) -> str:
    """The text between the section's markers (without the newlines that frame it)."""
    begin, end = markers(name)
    match = re.search(re.escape(begin) + r"\n(.*?)\n?" + re.escape(end), path.read_text(encoding="utf-8"), re.DOTALL)
    if match is None:
        raise ValueError(f"{path}: no section {name!r} (expected {begin} ... {end})")
    return match.group(1)


def write_section(path: Path, name: str, text: str) -> None:
    """Replace the section's text; the markers must already be in the file, once each."""
    begin, end = markers(name)
    content = path.read_text(encoding="utf-8")
    if content.count(begin) != 1 or content.count(end) != 1:
        raise ValueError(f"{path}: expected {begin} and {end} once each")
    head, rest = content.split(begin, 1)
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{begin}\n{text.strip()}\n{end}{tail}", encoding="utf-8")
