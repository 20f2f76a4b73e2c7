"""The README and docs/ say what the code does.

Every setting, meta key, spider hook and stat the code has is documented, and the reference documents
nothing the code lacks; every relative link resolves (anchors included); the commands they show are
accepted by the programs they name; the settings snippets pass the add-on's validation; and the
generated results sections are exactly what the bench scripts render from their stored JSON. The
pages' ``>>>`` examples run as doctests (setup.cfg: ``--doctest-glob=*.md``, ``testpaths`` has
``README.md`` and ``docs``).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import io
import re
import shlex
import subprocess
import sys
from configparser import ConfigParser
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from scrapy.settings import Settings
from scrapy.utils.misc import load_object

from bench import demo_results, sim_results
from bench.docs_section import read_section
from scrapy_costsched.settings import DEFAULTS, Config
from scrapy_costsched.sim.cli import parse_args

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "scrapy_costsched"
DOCS = ROOT / "docs"
README = ROOT / "README.md"
#: The pages these tests check: the README, the changelog and the reference (docs/ and docs/commands/).
PAGES = [README, ROOT / "CHANGES.md", *sorted(DOCS.glob("**/*.md"))]


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@cache
def _trees() -> tuple[tuple[Path, ast.Module], ...]:
    return tuple((path, ast.parse(path.read_text(encoding="utf-8"))) for path in sorted(PACKAGE.rglob("*.py")))


def _text_outside_code(path: Path) -> str:
    """The page without its fenced code blocks (headings and links live outside them)."""
    return re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)


def _code_spans(path: Path) -> list[str]:
    """Inline code outside the fenced blocks, a span broken over lines joined by a space."""
    return [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", _text_outside_code(path))]


def _fenced_blocks(path: Path) -> list[tuple[str, str]]:
    """(language, body) of each fenced code block."""
    return re.findall(r"^```(\w*)\n(.*?)^```", path.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)


# -- settings ---------------------------------------------------------------------------------------


def _code_settings() -> set[str]:
    """Settings the code defines (``DEFAULTS``) or names anywhere (``Addon`` sets one, errors name them)."""
    named = {node.value for _, tree in _trees() for node in ast.walk(tree)
             if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and re.fullmatch(r"COSTSCHED_[A-Z_]+", node.value)}
    return set(DEFAULTS) | named


def _documented_settings() -> dict[str, str]:
    """Each ``### COSTSCHED_*`` section of docs/settings.md and the text up to the next heading."""
    text = _text_outside_code(DOCS / "settings.md")
    return dict(re.findall(r"^### (COSTSCHED_[A-Z_]+)\n(.*?)(?=^#)", text + "\n#", flags=re.MULTILINE | re.DOTALL))


def test_every_setting_is_documented_and_nothing_else() -> None:
    assert sorted(_documented_settings()) == sorted(_code_settings())


def test_documented_defaults_are_the_code_s() -> None:
    for name, section in _documented_settings().items():
        match = re.search(r"^Default: `([^`]*)`", section, flags=re.MULTILINE)
        assert match is not None, f"{name}: no 'Default: `...`' line"
        assert ast.literal_eval(match.group(1)) == DEFAULTS[name], name


# -- meta keys and spider hooks ---------------------------------------------------------------------


def _is_meta(node: ast.expr) -> bool:
    """``meta``, ``request.meta`` or ``template["meta"]``."""
    return (isinstance(node, ast.Name) and node.id == "meta") \
        or (isinstance(node, ast.Attribute) and node.attr == "meta") \
        or (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == "meta")


def _costsched_name(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("costsched_"):
        return node.value
    return None


def _code_meta_keys() -> set[str]:
    """``costsched_*`` keys the code puts in, reads from or lists as request meta."""
    keys: set[str] = set()
    for _, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id.endswith("_META")
                                                    for t in node.targets):
                keys |= {n for c in ast.walk(node.value) if (n := _costsched_name(c))}
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("get", "pop", "setdefault") and _is_meta(node.func.value) and node.args:
                keys |= {n for n in [_costsched_name(node.args[0])] if n}
            elif isinstance(node, ast.Subscript) and _is_meta(node.value):
                keys |= {n for n in [_costsched_name(node.slice)] if n}
            elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.In | ast.NotIn) \
                    and _is_meta(node.comparators[0]):
                keys |= {n for n in [_costsched_name(node.left)] if n}
    return keys


def _code_hooks() -> set[str]:
    """Spider methods the code looks up: ``getattr(spider, "costsched_...")``."""
    return {name for _, tree in _trees() for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) >= 2 and "spider" in ast.unparse(node.args[0])
            and (name := _costsched_name(node.args[1]))}


def test_every_meta_key_is_documented_and_nothing_else() -> None:
    text = (DOCS / "meta-and-hooks.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (`costsched_[^|]*) \|", text, flags=re.MULTILINE)
    documented = {key for row in rows for key in re.findall(r"`(costsched_\w+)`", row)}
    assert sorted(documented) == sorted(_code_meta_keys())


def test_every_spider_hook_is_documented() -> None:
    text = (DOCS / "meta-and-hooks.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^### `(costsched_\w+)\(", text, flags=re.MULTILINE))
    hooks = _code_hooks()
    assert hooks == {"costsched_value"}
    assert hooks == documented


# -- stats --------------------------------------------------------------------------------------------

#: What a placeholder in a documented stat name may stand for: ``<host>`` or a concrete word.
_SEGMENT = r"(?:<[\w ]+>|[\w.:-]+)"


def _alternatives(node: ast.expr) -> list[str] | None:
    """The strings a placeholder can only be (``'a' if x else 'b'``); ``None`` when it can be anything."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        body, orelse = _alternatives(node.body), _alternatives(node.orelse)
        return None if body is None or orelse is None else body + orelse
    return None


def _code_stats() -> tuple[set[str], list[re.Pattern[str]]]:
    """Stat names the code writes: literal ``costsched/...`` strings, and f-strings as patterns."""
    literals: set[str] = set()
    patterns: list[re.Pattern[str]] = []
    for _, tree in _trees():
        in_fstrings = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and id(node) not in in_fstrings and isinstance(node.value, str) \
                    and re.fullmatch(r"costsched/[\w/.-]*\w", node.value):
                literals.add(node.value)
            elif isinstance(node, ast.JoinedStr) and isinstance(first := node.values[0], ast.Constant) \
                    and str(first.value).startswith("costsched/"):
                expansions = [""]
                for part in node.values:
                    if isinstance(part, ast.Constant):
                        options = [re.escape(str(part.value))]
                    else:
                        assert isinstance(part, ast.FormattedValue)
                        found = _alternatives(part.value)
                        options = [_SEGMENT] if found is None else [re.escape(o) for o in found]
                    expansions = [e + o for e in expansions for o in options]
                patterns += [re.compile(e) for e in expansions]
    return literals, patterns


def _documented_stats(path: Path) -> set[str]:
    return {span for span in _code_spans(path) if re.fullmatch(r"costsched/[^\s…]*[\w>]", span)}


def test_every_stat_the_code_writes_is_documented() -> None:
    documented = _documented_stats(DOCS / "stats.md")
    literals, patterns = _code_stats()
    assert sorted(literals - documented) == []
    undocumented = [p.pattern for p in patterns if not any(p.fullmatch(name) for name in documented)]
    assert undocumented == []


def test_every_documented_stat_is_one_the_code_writes() -> None:
    literals, patterns = _code_stats()
    for page in PAGES:
        phantoms = [name for name in _documented_stats(page)
                    if name not in literals and not any(p.fullmatch(name) for p in patterns)]
        assert phantoms == [], _rel(page)


def test_stats_cited_anywhere_are_in_the_stats_reference() -> None:
    reference = _documented_stats(DOCS / "stats.md")
    for page in PAGES:
        assert sorted(_documented_stats(page) - reference) == [], _rel(page)


# -- links -------------------------------------------------------------------------------------------


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation out, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    anchors: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+?)\s*$", _text_outside_code(path), flags=re.MULTILINE):
        slug, n = _slug(heading), 0
        while (candidate := slug if n == 0 else f"{slug}-{n}") in anchors:
            n += 1
        anchors.add(candidate)
    return anchors


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_relative_links_resolve(page: Path) -> None:
    targets = re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", _text_outside_code(page))
    assert targets or page != README
    broken = []
    for target in targets:
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists() or (anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved)):
            broken.append(target)
    assert broken == []


# -- commands and snippets ----------------------------------------------------------------------------


def _commands() -> list[tuple[Path, str]]:
    """Command lines the pages show: in sh/console blocks (the ``$ `` lines of a session, or every line;
    comments dropped, continuation lines joined) and in inline code that starts with a program this
    repository runs (but ``scrapy``)."""
    found: list[tuple[Path, str]] = []
    programs = ("python ", ".venv/bin/python ", "make ", "pytest ", "pip install ", "scrapy costsched-")
    for page in PAGES:
        for language, body in _fenced_blocks(page):
            if language not in ("sh", "console", ""):
                continue
            lines = body.replace("\\\n", " ").splitlines()
            if any(line.startswith("$ ") for line in lines):  # a session: the rest is output
                lines = [line for line in lines if line.startswith("$ ")]
            for line in lines:
                line = line.removeprefix("$ ").split(" #")[0].strip()
                if line.startswith(programs):
                    found.append((page, line))
        for span in _code_spans(page):  # prose names commands with placeholders: only blocks show them run
            if span.startswith(programs) and not span.startswith("scrapy "):
                found.append((page, span))
    return found


@cache
def _help(script: str) -> str:
    done = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True,
                          check=True, timeout=120)
    return done.stdout


@cache
def _collected(arguments: tuple[str, ...]) -> int:
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", *arguments], cwd=ROOT,
                          capture_output=True, text=True, check=False, timeout=300)
    return len([line for line in done.stdout.splitlines() if "::" in line])


def _extras() -> set[str]:
    parser = ConfigParser()
    parser.read(ROOT / "setup.cfg")
    return set(parser["options.extras_require"])


def _make_targets() -> set[str]:
    return set(re.findall(r"^([\w.-]+):", (ROOT / "Makefile").read_text(encoding="utf-8"), flags=re.MULTILINE))


def _check_command(line: str) -> str | None:
    """Why the command would fail at once, or ``None``."""
    words = shlex.split(line)
    if words[0] in ("python", ".venv/bin/python") and words[1:3] == ["-m", "scrapy_costsched.sim"]:
        with contextlib.redirect_stderr(io.StringIO()):
            try:
                parse_args([w for w in words[3:] if w != "--help"])
            except SystemExit:
                return "the simulator refuses these arguments"
        return None
    if words[0] in ("python", ".venv/bin/python"):
        if not (ROOT / words[1]).is_file():
            return f"no such script: {words[1]}"
        options = {w.split("=")[0] for w in words[2:] if w.startswith("--")}
        unknown = sorted(o for o in options if not re.search(rf"{re.escape(o)}\b", _help(words[1])))
        return f"options not in --help: {unknown}" if unknown else None
    if words[0] == "scrapy":
        shell = next((i for i, word in enumerate(words) if word[:1] in "|<>&" or word.startswith("2>")), len(words))
        return _check_scrapy_command(words[1], words[2:shell])
    if words[0] == "make":
        missing = sorted(set(words[1:]) - _make_targets())
        return f"no make target {missing}" if missing else None
    if words[0] == "pytest":
        arguments = tuple(w for w in words[1:] if w != "-s")
        return None if _collected(arguments) > 0 else "selects no test"
    if words[:2] == ["pip", "install"]:
        extras = {e for w in words[2:] for group in re.findall(r"\[([^\]]+)\]", w) for e in group.split(",")}
        missing = sorted(extras - _extras())
        return f"no extra {missing}" if missing else None
    return f"unchecked program: {line}"


def _check_scrapy_command(name: str, arguments: list[str]) -> str | None:
    """Whether the command registered as *name* (setup.cfg's entry points) parses *arguments*."""
    entry_points = ConfigParser()
    entry_points.read(ROOT / "setup.cfg")
    commands = dict(line.split(" = ") for line in entry_points["options.entry_points"]["scrapy.commands"].split("\n")
                    if line)
    if name not in commands:
        return f"no command {name}"
    module, _, cls = commands[name].partition(":")
    command = getattr(importlib.import_module(module), cls)()
    command.settings = Settings()
    parser = argparse.ArgumentParser()
    command.add_options(parser)
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            _, rest = parser.parse_known_args(arguments)  # as scrapy.cmdline parses: the rest are the arguments
        except SystemExit:
            return "the command refuses these options"
    unknown = [word for word in rest if word.startswith("-") and word != "-"]
    return f"unknown options {unknown}" if unknown else None


def test_shown_commands_are_accepted() -> None:
    commands = _commands()
    shown = {line for _, line in commands}
    # The pages show these; if one is dropped, this list goes with it.
    assert {"make demo", "make test", "python bench/validators.py --shares 0.3 0.5 0.9 --days 8",
            "python -m scrapy_costsched.sim --workload nonpoisson --policy costsched,nutch --json"} <= shown
    failures = {f"{_rel(page)}: {line}": why for page, line in commands if (why := _check_command(line))}
    assert failures == {}


def test_tests_and_scripts_named_in_the_pages_exist() -> None:
    missing = []
    for page in PAGES:
        for span in _code_spans(page):
            for path, _, test in re.findall(r"((?:tests|bench)/[\w/]+\.py)(::(\w+))?", span):
                if not (ROOT / path).is_file():
                    missing.append(f"{_rel(page)}: {path}")
                elif test and f"def {test}(" not in (ROOT / path).read_text(encoding="utf-8"):
                    missing.append(f"{_rel(page)}: {path}::{test}")
    assert missing == []


def _python_blocks() -> list[tuple[Path, str]]:
    return [(page, body) for page in PAGES for language, body in _fenced_blocks(page) if language == "python"]


def test_python_snippets_compile() -> None:
    assert _python_blocks()
    for page, body in _python_blocks():
        try:
            compile(body, str(page), "exec")
        except SyntaxError:  # a fragment of a callback: it must compile as a method's body
            compile("def parse(self, response):\n" + "\n".join("    " + line for line in body.splitlines()),
                    str(page), "exec")


def test_settings_snippets_are_valid_settings() -> None:
    snippets = [(page, body) for page, body in _python_blocks()
                if all(isinstance(s, ast.Assign) and all(isinstance(t, ast.Name) and t.id.isupper() for t in s.targets)
                       for s in ast.parse(body).body)]
    assert {_rel(page) for page, _ in snippets} >= {"README.md", "docs/usage.md"}
    for _, body in snippets:
        values: dict[str, Any] = {}
        exec(body, {}, values)  # noqa: S102 - the pages' own settings snippets
        Config.from_settings(Settings(values))
        for name in ("SCHEDULER", "COSTSCHED_FALLBACK_SCHEDULER", "SCHEDULER_PRIORITY_QUEUE"):
            if name in values:
                load_object(values[name])
        for name in ("ADDONS", "SPIDER_MIDDLEWARES", "DOWNLOADER_MIDDLEWARES", "ITEM_PIPELINES"):
            for path in values.get(name, {}):
                load_object(path)


# -- generated sections -----------------------------------------------------------------------------------


def test_simulator_tables_are_the_script_s_rendering_of_its_json() -> None:
    document = sim_results.Document.load(ROOT / "bench" / "sim_results.json")
    docs = Path("docs/results.md")
    expected = sim_results.render(document, sim_results.docs_image(document, docs))
    assert read_section(ROOT / docs, "sim_results") == expected.strip()
    assert document.plot is not None
    assert (ROOT / document.plot).is_file()


def test_readme_headline_is_the_script_s_rendering_of_its_json() -> None:
    document = sim_results.Document.load(ROOT / "bench" / "sim_results.json")
    expected = sim_results.headline(document, sim_results.results_link(Path("README.md")))
    assert read_section(README, "sim_headline") == expected.strip()


def test_demo_output_is_the_script_s_rendering_of_its_json() -> None:
    document = demo_results.Document.load(ROOT / "bench" / "demo_results.json")
    assert document.returncode == 0
    assert document.summary["passed"]
    assert read_section(DOCS / "results.md", "demo") == demo_results.render(document).strip()
