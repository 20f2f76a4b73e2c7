"""Example Scrapy project: a shop spider that keeps product prices and stock fresh on a budget."""
