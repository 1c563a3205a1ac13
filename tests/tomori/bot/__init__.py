"""Tests of the `tomori.bot` package, mirroring its layout."""
