from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.downloadermiddlewares import httpcompression
from scrapy.settings import Settings

from scrapy_costsched import metering

if TYPE_CHECKING:
    import pytest


def test_no_compression_gap_is_reported_for_the_encodings_scrapy_offers() -> None:
    """The warning follows what Scrapy itself offers: Scrapy 2.19 depends on both decoders (it uses
    ``backports.zstd``, not ``zstandard``) and offers them always, so it gets no warning."""
    offered = httpcompression.ACCEPTED_ENCODINGS
    gaps = metering.compression_gaps(Settings())
    assert (gaps == []) == (b"br" in offered and b"zstd" in offered)
    for name, encoding in (("Brotli", b"br"), ("Zstandard", b"zstd")):
        assert any(name in gap for gap in gaps) == (encoding not in offered)


def test_a_missing_encoding_is_named_with_what_servers_are_offered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metering, "ACCEPTED_ENCODINGS", [b"gzip", b"deflate", b"br"])
    assert metering.compression_gaps(Settings()) == [
        ("servers are not offered Zstandard (only gzip, deflate, br): "
         "pip install scrapy-costsched[bandwidth] installs the decoders Scrapy needs")]
    monkeypatch.setattr(metering, "ACCEPTED_ENCODINGS", [b"gzip", b"deflate", b"br", b"zstd"])
    assert metering.compression_gaps(Settings()) == []
    assert metering.compression_gaps(Settings({"COMPRESSION_ENABLED": False})) == [
        "COMPRESSION_ENABLED is False, so responses come uncompressed"]
