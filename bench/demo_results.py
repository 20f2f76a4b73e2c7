"""Run ``make demo``'s command and put its output in docs/results.md.

The demo (``example_project/run_demo.py``) crawls the bundled demo shop with real ``scrapy crawl``
processes for ten simulated days. This script runs the very command ``make demo`` runs, stores what
it printed and its JSON summary in ``--json FILE``, and with ``--write-docs docs/results.md``
replaces the text between ``<!-- demo:begin -->`` and ``<!-- demo:end -->`` there with the output.
``--from-json FILE`` writes the stored output again without crawling.

    python bench/demo_results.py --json bench/demo_results.json --write-docs docs/results.md
    python bench/demo_results.py --from-json bench/demo_results.json --write-docs docs/results.md
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docs_section import write_section

#: The command of ``make demo`` (Makefile), run from the repository root.
DEMO = ("example_project/run_demo.py", "--days", "10", "--workdir", "demo-output",
        "--json", "demo-output/summary.json")


@dataclass(frozen=True)
class Document:
    """One run of the demo as ``--json`` stores it."""

    command: str
    seconds: float
    returncode: int
    output: str
    summary: dict[str, Any]

    @classmethod
    def load(cls, path: Path) -> Document:
        return cls(**json.loads(path.read_text(encoding="utf-8")))

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1, sort_keys=True) + "\n", encoding="utf-8")


def run_demo() -> Document:
    """``make demo``'s command, with this interpreter; its stderr goes to ours."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, *DEMO], cwd=ROOT, stdout=subprocess.PIPE, text=True, check=False,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    summary_file = ROOT / DEMO[DEMO.index("--json") + 1]
    report = json.loads(summary_file.read_text(encoding="utf-8")) if summary_file.exists() else {}
    return Document(command="make demo", seconds=round(time.perf_counter() - started), returncode=done.returncode,
                    output=done.stdout, summary=report.get("summary", {}))


def render(document: Document) -> str:
    """The demo's output as a Markdown code block, with how long it took."""
    return (f"Output of `{document.command}` (it runs `python {' '.join(DEMO)}`; "
            f"{document.seconds:.0f} s on this machine):\n\n```\n{document.output.rstrip()}\n```\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, metavar="FILE", help="store the demo's output and summary here")
    parser.add_argument("--from-json", type=Path, metavar="FILE", help="use the output stored in FILE")
    parser.add_argument("--write-docs", type=Path, metavar="FILE",
                        help="replace the demo section of FILE (docs/results.md) with the output")
    args = parser.parse_args()
    document = Document.load(args.from_json) if args.from_json else run_demo()
    if document.returncode != 0:
        print(f"the demo exited with {document.returncode}; nothing written", file=sys.stderr)
        return 1
    if args.json:
        document.save(args.json)
    if args.write_docs:
        write_section(args.write_docs, "demo", render(document))
    else:
        print(render(document))
    return 0


if __name__ == "__main__":
    sys.exit(main())
