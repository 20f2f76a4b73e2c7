"""The change model (``scrapy_costsched.model``) must import without Scrapy.

Importing a subpackage runs its parent's ``__init__``, and
``scrapy_costsched/__init__.py`` imports the Scrapy glue, so the check runs in
a fresh interpreter where the parent is a bare module and Scrapy, Twisted and
the third-party numeric libraries are blocked (``sys.modules[name] = None``
makes ``import name`` raise ImportError).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

MODEL = Path(__file__).resolve().parent.parent / "scrapy_costsched" / "model"
BLOCKED = ("scrapy", "twisted", "numpy", "scipy", "itemadapter", "sqlitedict", "xxhash")

CHECK = """
import importlib, pkgutil, sys, types
for name in {blocked!r}:
    sys.modules[name] = None
parent = types.ModuleType("scrapy_costsched")
parent.__path__ = [{package!r}]
sys.modules["scrapy_costsched"] = parent
import scrapy_costsched.model as model
for info in pkgutil.iter_modules(model.__path__):
    importlib.import_module("scrapy_costsched.model." + info.name)
loaded = sorted(
    name for name, module in sys.modules.items()
    if module is not None and name.split(".")[0] in {blocked!r}
)
assert not loaded, loaded
print(",".join(sorted(model.__all__)))
"""


def test_model_imports_without_scrapy() -> None:
    code = CHECK.format(blocked=BLOCKED, package=str(MODEL.parent))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "estimate_rate" in result.stdout.split(",")


def test_model_modules_import_only_the_standard_library() -> None:
    for path in sorted(MODEL.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level > 0 or (node.module or "").startswith("scrapy_costsched.model"):
                    continue  # within the package
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names, f"{path.name} imports {name}"


# -- the simulator (scrapy_costsched.sim) ---------------------------------------

SIM = MODEL.parent / "sim"
#: Third-party imports the simulator may make: only the optional progress bar, imported where it is drawn.
SIM_OPTIONAL = {"tqdm"}

SIM_CHECK = """
import importlib, pkgutil, sys, types
for name in {blocked!r}:
    sys.modules[name] = None
parent = types.ModuleType("scrapy_costsched")
parent.__path__ = [{package!r}]
sys.modules["scrapy_costsched"] = parent
import scrapy_costsched.sim as sim
for info in pkgutil.iter_modules(sim.__path__):
    if info.name != "__main__":
        importlib.import_module("scrapy_costsched.sim." + info.name)
from scrapy_costsched.sim import SimConfig, simulate
result = simulate(SimConfig(workload="gamma", pages=30, cycles=4, policies=("costsched",)))
loaded = sorted(
    name for name, module in sys.modules.items()
    if module is not None and name.split(".")[0] in {blocked!r}
)
assert not loaded, loaded
print(round(result.policies["costsched"].metrics.freshness, 6) >= 0.0)
"""


def test_simulator_runs_without_scrapy() -> None:
    code = SIM_CHECK.format(blocked=BLOCKED, package=str(MODEL.parent))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"


def test_simulator_modules_import_only_the_standard_library() -> None:
    for path in sorted(SIM.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level > 0 or module.startswith(("scrapy_costsched.model", "scrapy_costsched.sim")):
                    continue  # within the package, or the change model
                names = [module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top in SIM_OPTIONAL, f"sim/{path.name} imports {name}"
