"""Tests of invalidation rules, write-path coverage and the bus."""
