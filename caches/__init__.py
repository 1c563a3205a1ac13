"""Cache layers of the Tomori bot: core primitive, layers, invalidation, bus."""
