"""Cache metrics: samples, sinks and retention."""
