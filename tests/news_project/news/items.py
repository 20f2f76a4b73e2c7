# Define here the models for your scraped items
#
# See documentation in:
# https://docs.scrapy.org/en/latest/topics/items.html

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Article:
    """One article page as scraped (text fields as the page prints them, cleaned by the pipeline)."""

    url: str
    id: int
    section: int
    title: str
    updated: str
    body: str


@dataclass
class Headline:
    """An article as a section page lists it (``-a headlines=1``)."""

    section: str
    title: str
    url: str
