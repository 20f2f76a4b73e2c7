"""Item hashes: the same in every process, for every value a spider may put in an item."""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
from datetime import date, datetime, timezone
from decimal import Decimal
from enum import Enum
from typing import Any

import pytest
import scrapy

from scrapy_costsched.records import RecordHasher, UnhashableItem
from tests.helpers import ROOT

HASHER = RecordHasher({}, {}, {})


def item_hash(item: Any) -> str:
    return HASHER.item_hash(item)


class Product(scrapy.Item):
    name = scrapy.Field()
    maker = scrapy.Field()
    offer = scrapy.Field()


@dataclasses.dataclass
class Offer:
    shops: set[str]
    price: Decimal


class Colour(Enum):
    RED = "red"


class Maker:
    """A value with no text of its own: its ``str`` is the default repr, with a memory address."""


class NamedMaker:
    def __str__(self) -> str:
        return "ACME"


#: Hashes an item with sets at every level; prints the hash.
SEEDED_HASH = """
import dataclasses
from scrapy_costsched.records import RecordHasher

@dataclasses.dataclass
class Offer:
    shops: set

words = [f"tag-{n}" for n in range(30)]
item = {"tags": set(words), "frozen": frozenset(words), "pairs": {(w, len(w)) for w in words},
        "offers": [Offer(set(words))], "by_tag": {w: len(w) for w in set(words)}}
print(RecordHasher({}, {}, {}).item_hash(item))
"""


def test_an_item_hashes_the_same_under_every_hash_seed() -> None:
    hashes = set()
    for seed in ("1", "2", "3"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(ROOT))
        proc = subprocess.run([sys.executable, "-c", SEEDED_HASH], env=env, capture_output=True, text=True,
                              timeout=60, check=True)
        hashes.add(proc.stdout.strip())
    assert len(hashes) == 1


def test_dicts_with_mixed_key_types_hash() -> None:
    assert item_hash({"specs": {1: "a", "b": 2}}) == item_hash({"specs": {"b": 2, 1: "a"}})
    assert item_hash({"specs": {None: 1, (1, 2): "t", "x": 3}}) == item_hash({"specs": {"x": 3, (1, 2): "t", None: 1}})
    assert item_hash({"specs": {1: "a", "b": 2}}) != item_hash({"specs": {1: "a", "b": 3}})


def test_keys_equal_as_text_stay_apart_whatever_their_order() -> None:
    one_is_a = item_hash({"specs": {1: "a", "1": "b"}})
    assert one_is_a == item_hash({"specs": {"1": "b", 1: "a"}})
    assert one_is_a != item_hash({"specs": {1: "b", "1": "a"}})


def test_values_without_json_form_get_stable_forms() -> None:
    when = datetime(2026, 3, 1, 12, 30, tzinfo=timezone.utc)
    assert item_hash({"at": when, "on": date(2026, 3, 1)}) == item_hash({"at": when.isoformat(), "on": "2026-03-01"})
    assert item_hash({"colour": Colour.RED}) == item_hash({"colour": "red"})
    assert item_hash({"blob": b"\x00\xff"}) == item_hash({"blob": "AP8="})
    assert item_hash({"dims": (1, 2)}) == item_hash({"dims": [1, 2]})
    assert item_hash({"price": Decimal("1.10")}) != item_hash({"price": Decimal("1.1")})
    assert item_hash({"maker": NamedMaker()}) == item_hash({"maker": "ACME"})
    floats = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
    assert item_hash(floats) == item_hash(dict(floats)) != item_hash({**floats, "nan": 0.0})


def test_nested_items_and_dataclasses_hash_by_their_fields() -> None:
    product = Product(name="kettle", offer=Offer({"b-shop", "a-shop"}, Decimal("9.90")))
    as_plain = {"name": "kettle", "offer": {"shops": ["a-shop", "b-shop"], "price": "9.90"}}
    assert item_hash(product) == item_hash(Product(**as_plain))
    assert item_hash({"products": [product]}) == item_hash({"products": [dict(as_plain)]})


@pytest.mark.parametrize("value", [Maker(), lambda: 1, (n for n in range(3)), [{None: Maker()}]],
                         ids=["object", "function", "generator", "nested"])
def test_values_known_only_by_a_memory_address_are_unhashable(value: Any) -> None:
    with pytest.raises(UnhashableItem, match=r"field 'maker' of Product: .* memory address"):
        item_hash(Product(name="kettle", maker=value))
    assert RecordHasher({}, {"Product": ("maker",)}, {}).item_hash(Product(name="kettle", maker=value))


def test_an_item_that_contains_itself_is_unhashable() -> None:
    specs: dict[Any, Any] = {"size": 1}
    specs["again"] = specs
    with pytest.raises(UnhashableItem, match="field 'specs' of dict"):
        item_hash({"name": "kettle", "specs": specs})


def test_strings_with_lone_surrogates_hash() -> None:
    assert item_hash({"name": "bad \ud800 text"}) != item_hash({"name": "bad text"})


def test_pages_hashed_under_the_first_canonical_form_are_rebaselined() -> None:
    # The configuration id that scrapy-costsched 0.1.0 stored with every page under the default settings.
    assert RecordHasher({}, {}, {}).config_id != "ee4c5e8fc13891cf"


def test_fields_item_pipelines_write_are_left_out_unless_hash_fields_name_them() -> None:
    plain = RecordHasher({}, {}, {})
    media = RecordHasher({}, {}, {}, pipeline_fields=("files",))
    downloaded = {"title": "a", "files": [{"path": "full/1.pdf", "status": "downloaded"}]}
    uptodate = {"title": "a", "files": [{"path": "full/1.pdf", "status": "uptodate"}]}
    assert media.item_hash(downloaded) == media.item_hash(uptodate) == media.item_hash({"title": "a"})
    assert plain.item_hash(downloaded) != plain.item_hash(uptodate)
    named = RecordHasher({"*": ("title", "files")}, {}, {}, pipeline_fields=("files",))
    assert named.item_hash(downloaded) != named.item_hash(uptodate)
    # A crawl without media pipelines keeps its configuration (no re-baseline on upgrade); one with them re-baselines.
    assert RecordHasher({}, {}, {}, pipeline_fields=()).config_id == plain.config_id != media.config_id
