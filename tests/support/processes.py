"""Run a process of the project's: to its end (a writer, a shell), or watched as it runs."""

from __future__ import annotations

import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_python(
    *args: str,
    env: dict[str, str] | None = None,
    returncode: int = 0,
    timeout: float = 120,
    with_stderr: bool = False,
) -> str:
    """Run `python *args` from the repository root; assert its exit code; return its stdout.

    `with_stderr`: return stderr too, interleaved (where the logs go).
    """
    done = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if with_stderr else subprocess.PIPE,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == returncode, done.stderr or done.stdout
    return done.stdout


class WatchedProcess:
    """A subprocess whose output lines (stdout and stderr) can be awaited."""

    def __init__(
        self,
        argv: Sequence[str | Path],
        *,
        env: dict[str, str],
        cwd: Path = ROOT,
        new_session: bool = False,
    ) -> None:
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=new_session,  # a terminal's foreground job
        )
        self.lines: list[str] = []
        self.ended = False  # the output's end was read
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line)
        self._queue.put(None)

    def _take(self, deadline: float) -> str | None:
        """Return the next line (None at the end); raise queue.Empty at `deadline`."""
        if self.ended:
            return None
        line = self._queue.get(timeout=max(deadline - time.monotonic(), 0))
        if line is None:
            self.ended = True
        else:
            self.lines.append(line)
        return line

    def wait_for(
        self, text: str | re.Pattern[str], timeout: float = 60, *, after: int = 0
    ) -> str:
        """Return the first output line containing `text` (or matching it); fail on exit or timeout.

        `after`: look only at the lines after the first `after` (a later one).
        """

        def found(line: str) -> bool:
            return text in line if isinstance(text, str) else bool(text.search(line))

        seen = next((line for line in self.lines[after:] if found(line)), None)
        if seen is not None:
            return seen
        deadline = time.monotonic() + timeout  # in all, however many lines come
        while True:
            try:
                taken = self._take(deadline)
            except queue.Empty:
                raise AssertionError(
                    f"no {text!r} within {timeout}s:\n{self.output}"
                ) from None
            if taken is None:
                raise AssertionError(f"it exited before {text!r}:\n{self.output}")
            if found(taken):
                return taken

    def collect(self, until: float) -> bool:
        """Take in the lines that come before monotonic time `until`; False once they ended."""
        try:
            while self._take(until) is not None:
                pass
        except queue.Empty:
            return True
        return False

    def wait_exit(self, timeout: float = 30) -> int:
        """Wait for the process to end, draining its output; return the exit code."""
        code = self.proc.wait(timeout)
        self.collect(time.monotonic() + 5)
        return code

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def stop(self) -> None:
        """SIGTERM (a clean stop), SIGKILL after 15 s."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
