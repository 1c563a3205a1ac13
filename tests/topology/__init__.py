"""Tests of `make run`: the embedded production topology and a second terminal."""
