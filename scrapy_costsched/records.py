"""What a visit saw, reduced to hashes: items over a canonical form, or a hub's outlinks.

A change is a change of the extracted record, never of the raw HTML: volatile
timestamps, ad slots and session tokens are left out with
``COSTSCHED_IGNORE_FIELDS`` (or only ``COSTSCHED_HASH_FIELDS`` are kept).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import date, time
from decimal import Decimal
from enum import Enum
from functools import cached_property
from typing import TYPE_CHECKING, Any

import xxhash
from itemadapter import ItemAdapter

if TYPE_CHECKING:
    from collections.abc import Iterable

#: Part of the hash configuration: bump when the canonical form changes, so
#: stored pages are re-baselined instead of all reported as changed.
CANONICAL_FORM_VERSION = 2

#: Hex digits kept of a field's hash: 32 bits, so a page stores a few bytes per field; a
#: collision only hides one change of one field from the volatility check, never from the record.
FIELD_HASH_CHARS = 8

#: The default ``repr`` of objects, functions and generators: differs in every process.
_MEMORY_ADDRESS = re.compile(r" at 0x[0-9A-Fa-f]+")


class UnhashableItem(ValueError):
    """An item field has no form that is the same in every process, so it cannot take part in a record."""

    def __init__(self, item_type: str, field: str, reason: str) -> None:
        super().__init__(f"cannot hash field {field!r} of {item_type}: {reason}")
        self.item_type = item_type
        self.field = field


class _NoStableForm(Exception):
    """A value the canonical form refuses, before the field it sits in is known."""


def _stable_form(value: Any) -> Any:
    """What stands for a value JSON has no form for (the encoder's ``default``): the same in every process."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (date, time)):  # datetimes too
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(value).decode("ascii")
    if ItemAdapter.is_item(value):  # nested Items, dataclasses, attrs, pydantic
        return dict(ItemAdapter(value).items())
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, AbstractSet):  # iteration order depends on PYTHONHASHSEED
        return sorted(value, key=_canonical_json)
    if isinstance(value, Sequence):
        return list(value)
    try:
        text = str(value)
    except Exception as exc:
        raise _NoStableForm(f"str() of a {type(value).__qualname__} raised {exc!r}") from exc
    if _MEMORY_ADDRESS.search(text):
        raise _NoStableForm(f"a {type(value).__qualname__} has no stable form, only {text!r} (a memory address); "
                            "convert it in the spider or leave the field out with COSTSCHED_IGNORE_FIELDS")
    return text


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_stable_form)


def _canonical_json(value: Any) -> str:
    """Sorted-key JSON of *value* with the stable forms above; raises ``_NoStableForm``."""
    try:
        return _ENCODER.encode(value)
    except (TypeError, ValueError):
        # Keys JSON cannot sort or hold ({1: "a", "b": 2}, tuple keys), or a reference cycle:
        # the slower walk that turns every key into a string.
        return _ENCODER.encode(_plain(value, set()))


def _plain(value: Any, path: set[int]) -> Any:
    """*value* as JSON whose objects have string keys only; *path* holds the containers above it."""
    if value is None or isinstance(value, (str, int, float)):
        return value
    if id(value) in path:
        raise _NoStableForm(f"a {type(value).__qualname__} in it contains itself")
    path.add(id(value))
    try:
        if isinstance(value, dict):
            return _plain_dict(value, path)
        if isinstance(value, (list, tuple)):
            return [_plain(element, path) for element in value]
        return _plain(_stable_form(value), path)
    finally:
        path.discard(id(value))


def _plain_dict(value: dict[Any, Any], path: set[int]) -> Any:
    entries = [(_key_text(key, path), key, element) for key, element in value.items()]
    if len({text for text, _, _ in entries}) == len(entries):
        return {text: _plain(element, path) for text, _, element in entries}
    # Keys that are equal as text ({1: "a", "1": "b"}) stay apart as [key, key type, value]
    # triples, in an order that does not depend on the order of insertion.
    triples = [[text, type(key).__qualname__, _plain(element, path)] for text, key, element in entries]
    return sorted(triples, key=_ENCODER.encode)


def _key_text(key: Any, path: set[int]) -> str:
    """A key as JSON writes keys: strings as they are, ``1`` as ``"1"``, ``None`` as ``"null"``."""
    if isinstance(key, str):
        return key
    plain = _plain(key, path)
    return plain if isinstance(plain, str) else _ENCODER.encode(plain)


def item_type_name(item: Any) -> str:
    return type(item).__name__


def _fields_for(per_type: Mapping[str, tuple[str, ...]], type_name: str) -> tuple[str, ...] | None:
    return per_type.get(type_name, per_type.get("*"))


@dataclass(frozen=True)
class ItemDigest:
    """What the record keeps of one item: its hash, and what the hash was taken of."""

    hash: str
    """xxh3-64 of the item's canonical JSON (:meth:`RecordHasher.item_hash`)."""
    canonical: dict[str, Any]
    """The item's type and the fields the hash covers (:meth:`RecordHasher.canonical`)."""

    @property
    def field_names(self) -> list[str]:
        return [str(name) for name in self.canonical["fields"]]

    @property
    def shape(self) -> str:
        """The item's type and the names of the fields the hash covers: what a change to the spider's code changes
        where a change of the page changes values (a page's record keeps the set of its items' shapes)."""
        return f"{self.canonical['type']}:{','.join(sorted(self.field_names))}"

    def field_hashes(self) -> dict[str, str]:
        """A short hash of each field the item hash covers, to tell which field made a record change.

        Only the value is hashed, not the item type, so equal fields hash alike in any kind of item.
        """
        canonical = self.canonical
        return {str(name): _digest(canonical, value)[:FIELD_HASH_CHARS] for name, value in canonical["fields"].items()}


@dataclass(frozen=True)
class RecordHasher:
    """Hashes items the same way on every run, for one hash configuration."""

    hash_fields: Mapping[str, tuple[str, ...]]
    ignore_fields: Mapping[str, tuple[str, ...]]
    item_key: Mapping[str, str]
    pipeline_fields: tuple[str, ...] = ()
    """Fields item pipelines write (a media pipeline's ``files``): left out of every item unless
    ``COSTSCHED_HASH_FIELDS`` names them (:mod:`~scrapy_costsched.media`)."""

    @cached_property
    def config_id(self) -> str:
        """Identifies the configuration; pages hashed under another one are re-baselined (asked of every item)."""
        config: list[Any] = [CANONICAL_FORM_VERSION, sorted(self.hash_fields.items()),
                             sorted(self.ignore_fields.items()), sorted(self.item_key.items())]
        if self.pipeline_fields:  # only then: the states of crawls without them keep their configuration
            config.append(sorted(self.pipeline_fields))
        return xxhash.xxh3_64_hexdigest(json.dumps(config, sort_keys=True).encode())

    def canonical(self, item: Any) -> dict[str, Any]:
        """The item's type and the fields that matter; nested values get their stable form when encoded."""
        type_name = item_type_name(item)
        fields = dict(item) if isinstance(item, dict) else dict(ItemAdapter(item).items())
        keep = _fields_for(self.hash_fields, type_name)
        if keep is not None:
            fields = {name: fields[name] for name in keep if name in fields}
        else:
            for name in self.pipeline_fields:
                fields.pop(name, None)
        for name in _fields_for(self.ignore_fields, type_name) or ():
            fields.pop(name, None)
        return {"type": type_name, "fields": fields}

    def item_hash(self, item: Any) -> str:
        """xxh3-64 over the canonical JSON, the same in every process; raises ``UnhashableItem``."""
        return self.digest(item).hash

    def digest(self, item: Any) -> ItemDigest:
        """The item's hash, its shape and its fields' hashes, from one canonical form; raises ``UnhashableItem``."""
        canonical = self.canonical(item)
        return ItemDigest(_digest(canonical, canonical), canonical)

    def field_hashes(self, item: Any) -> dict[str, str]:
        """:meth:`ItemDigest.field_hashes` of *item*; raises ``UnhashableItem`` exactly when :meth:`item_hash` does."""
        return self.digest(item).field_hashes()

    def item_key_of(self, item: Any) -> str | None:
        """The item's identity under ``COSTSCHED_ITEM_KEY``, or ``None`` when no key applies."""
        field_name = self.item_key.get(item_type_name(item), self.item_key.get("*"))
        if field_name is None:
            return None
        adapter = ItemAdapter(item)
        if field_name not in adapter or adapter[field_name] is None:
            return None
        return f"{item_type_name(item)}:{adapter[field_name]}"


def _digest(canonical: dict[str, Any], value: Any) -> str:
    """xxh3-64 of *value*'s canonical JSON, *value* being the *canonical* record or one of its fields."""
    try:
        text = _canonical_json(value)
    except _NoStableForm as exc:
        field = next(name for name, field_value in canonical["fields"].items() if not _has_stable_form(field_value))
        raise UnhashableItem(canonical["type"], str(field), str(exc)) from None
    return xxhash.xxh3_64_hexdigest(text.encode("utf-8", "surrogatepass"))


def _has_stable_form(value: Any) -> bool:
    try:
        _canonical_json(value)
    except _NoStableForm:
        return False
    return True


def record_hash(parts: Iterable[str]) -> str:
    """Hash of a sorted multiset of item hashes (or a sorted set of outlinks)."""
    return xxhash.xxh3_64_hexdigest("\n".join(sorted(parts)).encode())
