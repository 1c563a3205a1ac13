"""The discord.py bot worker."""
