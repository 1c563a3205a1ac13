"""Cache layers, one module per layer of the spec."""
