"""``scrapy costsched-report``: where each budget period's money went and what it found."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from scrapy.exceptions import UsageError

from scrapy_costsched.commands import StateCommand, reading_tracker

if TYPE_CHECKING:
    import argparse


class Command(StateCommand):
    default_settings = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return "[--spider SPIDER | --state URI] [--json] [--html FILE] [--last N] [--host HOST]..."

    def short_desc(self) -> str:
        return "Report cost per detected change, no-change fetches, hosts and the next plan from a costsched state"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("--json", action="store_true", help="print the report as JSON")
        parser.add_argument("--html", metavar="FILE", help="also write the report with charts as one HTML file")
        parser.add_argument("--last", type=int, metavar="N", help="only the last N budget periods")
        parser.add_argument("--host", action="append", default=[], metavar="HOST",
                            help="only this host (repeat for more)")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        from scrapy_costsched.report import build_report
        from scrapy_costsched.report.terminal import render_terminal

        if args:
            raise self.argument_error(f"unexpected arguments: {' '.join(args)}", args)
        if opts.last is not None and opts.last < 1:
            raise UsageError("--last takes a number of periods, 1 or more", print_help=False)
        if opts.html:
            from scrapy_costsched.report.html import ReportDependencyError, require_libraries

            try:
                require_libraries()  # before reading the state: say at once what is missing
            except ReportDependencyError as exc:
                raise UsageError(str(exc), print_help=False) from None
        state = self.target(opts)
        store = self.open_state(state.uri)
        try:
            report = build_report(reading_tracker(state, store), state.uri, last_periods=opts.last, hosts=opts.host)
        finally:
            store.close()
        if opts.html:
            from scrapy_costsched.report.html import render_html

            Path(opts.html).write_text(render_html(report), encoding="utf-8")
            print(f"costsched: wrote the HTML report to {opts.html}", file=sys.stderr)
        if opts.json:
            print(json.dumps(report.to_json(), indent=2, sort_keys=True))
        else:
            print(render_terminal(report))
