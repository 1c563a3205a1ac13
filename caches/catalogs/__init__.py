"""OpenRouter model catalogs."""
