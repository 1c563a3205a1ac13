"""Tests of the `caches` package, mirroring its layout."""
