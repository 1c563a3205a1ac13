"""Tests of the management commands' console output."""
