"""Tests of the cache metrics logger (`metrics.logger`)."""
