"""Item pipelines that download the files an item lists: Scrapy's ``FilesPipeline`` and ``ImagesPipeline``.

Their downloads go through ``engine.download``, not the scheduler, so no visit's meta ties them to a page;
the URLs the spider's item lists in the pipeline's URL field (``file_urls``) do. Their result field
(``files``) tells what the pipeline stored and whether it downloaded it again (``"downloaded"``, then
``"uptodate"``), not what the page shows, so records leave it out. Found on a trial with a parts catalogue
whose datasheets, under byte billing, cost a hundred times its pages and were charged to no page, and whose
pages all counted as changed at their second visit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy.pipelines.files import FilesPipeline

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


@dataclass(frozen=True)
class MediaFields:
    """The item fields one media pipeline reads its URLs from and writes its results to."""

    pipeline: str
    urls: str
    result: str


def media_fields(crawler: Crawler) -> list[MediaFields]:
    """The fields of the media pipelines among the crawl's item pipelines (their own settings applied), once
    the engine has built them."""
    assert crawler.engine is not None
    return [fields for pipeline in crawler.engine.scraper.itemproc.middlewares if (fields := fields_of(pipeline))]


def fields_of(pipeline: Any) -> MediaFields | None:
    """``ImagesPipeline`` is a ``FilesPipeline`` with fields of its own (not imported: it needs Pillow)."""
    if not isinstance(pipeline, FilesPipeline):
        return None
    name = type(pipeline).__name__
    images_urls = getattr(pipeline, "images_urls_field", None)
    if images_urls is not None:
        return MediaFields(name, images_urls, getattr(pipeline, "images_result_field", "images"))
    return MediaFields(name, pipeline.files_urls_field, pipeline.files_result_field)
