"""Which item fields the media pipelines read and write, as a crawl's settings make them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.pipelines.files import FilesPipeline
from scrapy.pipelines.images import ImagesPipeline
from scrapy.utils.test import get_crawler

from scrapy_costsched.media import MediaFields, fields_of

if TYPE_CHECKING:
    from pathlib import Path


def test_each_media_pipeline_names_the_fields_its_settings_give_it(tmp_path: Path) -> None:
    crawler = get_crawler(settings_dict={"FILES_STORE": str(tmp_path), "IMAGES_STORE": str(tmp_path),
                                         "FILES_RESULT_FIELD": "stored", "IMAGES_URLS_FIELD": "pictures"})
    files = FilesPipeline.from_crawler(crawler)
    images = ImagesPipeline.from_crawler(crawler)  # a FilesPipeline, whose files_* fields it does not use
    assert fields_of(files) == MediaFields("FilesPipeline", "file_urls", "stored")
    assert fields_of(images) == MediaFields("ImagesPipeline", "pictures", "images")
    assert fields_of(object()) is None
