"""Tests of the cache layers I: server, persona, user and channel state."""
