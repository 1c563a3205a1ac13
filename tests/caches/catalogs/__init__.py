"""Tests of the OpenRouter catalogs."""
