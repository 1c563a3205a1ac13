"""The per-thread CPU counter: bounded labels, and series that only grow."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, generate_latest

from metrics.prometheus.threads import (
    ThreadCpuCollector,
    proc_thread_seconds,
    thread_label,
)


def test_thread_labels_drop_running_numbers() -> None:
    assert thread_label("tomori-db-writes_0") == "tomori-db-writes"
    assert thread_label("ThreadPoolExecutor-0_0") == "ThreadPoolExecutor"
    assert (
        thread_label("Thread-65 (process_request_thread)") == "process_request_thread"
    )
    assert thread_label("MainThread") == "MainThread"
    assert thread_label("tomori-bus-subscriber") == "tomori-bus-subscriber"


def test_this_threads_cpu_is_read_from_procfs() -> None:
    native = threading.get_native_id()
    before = proc_thread_seconds(native)
    assert before is not None
    deadline = before + 0.05
    spun = 0
    while (proc_thread_seconds(native) or 0.0) < deadline:  # burn CPU, no sleep
        spun += sum(range(1000))
    assert spun > 0
    assert proc_thread_seconds(native) >= deadline  # type: ignore[operator]
    assert proc_thread_seconds(2**31 - 1) is None


def test_an_ended_threads_seconds_stay_in_its_series() -> None:
    readings: dict[int, float] = {}
    collector = ThreadCpuCollector(read=lambda native: readings.get(native))
    done = threading.Event()
    release = threading.Event()

    def work() -> None:
        readings[threading.get_native_id()] = 2.5
        done.set()
        release.wait(10)

    worker = threading.Thread(target=work, name="job-worker_3")
    worker.start()
    done.wait(10)
    assert collector.totals()["job-worker"] == 2.5
    release.set()
    worker.join(10)
    assert collector.totals()["job-worker"] == 2.5  # ended: still counted
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    assert 'tomori_thread_cpu_seconds_total{thread="job-worker"} 2.5' in text
