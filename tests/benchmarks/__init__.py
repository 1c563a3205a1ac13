"""Tests of the benchmark scripts' own arithmetic."""
