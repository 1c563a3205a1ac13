"""Prometheus metrics and health probes of a bot worker (one endpoint per process).

`buckets` is dependency-free (the hot paths import it); `collector`,
`sampled`, `health` and `endpoint` build the scrape-time view on
prometheus_client; `worker` wires them into a running bot worker.
"""
