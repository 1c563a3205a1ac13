"""Tests for the memory guard, memory readers and libvips settings."""
