"""Spiders of the demo project."""
