"""Tests of the simulated Discord against the real discord.py client."""
