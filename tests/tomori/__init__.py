"""Tests of the `tomori` package, mirroring its layout."""
