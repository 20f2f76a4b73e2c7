"""What a visit saw, reduced to hashes: items over a canonical form, or a hub's outlinks.

A change is a change of the extracted record, never of the raw HTML: volatile
timestamps, ad slots and session tokens are left out with
``COSTSCHED_IGNORE_FIELDS`` (or only ``COSTSCHED_HASH_FIELDS`` are kept).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import xxhash
from itemadapter import ItemAdapter

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

#: Part of the hash configuration: bump when the canonical form changes, so
#: stored pages are re-baselined instead of all reported as changed.
CANONICAL_FORM_VERSION = 1


def item_type_name(item: Any) -> str:
    return type(item).__name__


def _fields_for(per_type: Mapping[str, tuple[str, ...]], type_name: str) -> tuple[str, ...] | None:
    return per_type.get(type_name, per_type.get("*"))


@dataclass(frozen=True)
class RecordHasher:
    """Hashes items the same way on every run, for one hash configuration."""

    hash_fields: Mapping[str, tuple[str, ...]]
    ignore_fields: Mapping[str, tuple[str, ...]]
    item_key: Mapping[str, str]

    @property
    def config_id(self) -> str:
        """Identifies the configuration; pages hashed under another one are re-baselined."""
        config = [CANONICAL_FORM_VERSION, sorted(self.hash_fields.items()), sorted(self.ignore_fields.items()),
                  sorted(self.item_key.items())]
        return xxhash.xxh3_64_hexdigest(json.dumps(config, sort_keys=True).encode())

    def canonical(self, item: Any) -> dict[str, Any]:
        type_name = item_type_name(item)
        fields = ItemAdapter(item).asdict()
        keep = _fields_for(self.hash_fields, type_name)
        if keep is not None:
            fields = {name: fields[name] for name in keep if name in fields}
        for name in _fields_for(self.ignore_fields, type_name) or ():
            fields.pop(name, None)
        return {"type": type_name, "fields": fields}

    def item_hash(self, item: Any) -> str:
        """xxh3-64 over sorted-key JSON; values JSON cannot hold are hashed by their ``str``."""
        text = json.dumps(self.canonical(item), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
        return xxhash.xxh3_64_hexdigest(text.encode())

    def item_key_of(self, item: Any) -> str | None:
        """The item's identity under ``COSTSCHED_ITEM_KEY``, or ``None`` when no key applies."""
        field_name = self.item_key.get(item_type_name(item), self.item_key.get("*"))
        if field_name is None:
            return None
        adapter = ItemAdapter(item)
        if field_name not in adapter or adapter[field_name] is None:
            return None
        return f"{item_type_name(item)}:{adapter[field_name]}"


def record_hash(parts: Iterable[str]) -> str:
    """Hash of a sorted multiset of item hashes (or a sorted set of outlinks)."""
    return xxhash.xxh3_64_hexdigest("\n".join(sorted(parts)).encode())


class UnhashableItem(ValueError):
    """An item holds a value with no stable canonical form; the message names the item type and field."""
