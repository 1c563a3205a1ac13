"""Short-lived writers: fork one process per write that commits a persona save and exits at once.

Run as `python -m tests.caches.invalidation.writer_fleet PERSONA_ID COUNT OUT_DIR
[AT_ONCE]`
with the test settings. Django is set up once, in the parent; each child
commits one save (after a rolled-back savepoint, as `manage.py shell` scripts
do) and leaves through the interpreter's normal exit, atexit hooks and all,
with its stderr in OUT_DIR/<pid>.log, after closing its connections as
`manage.py` does. The parent prints one child pid a line.
"""

from __future__ import annotations

import gc
import os
import sys


def _write(persona_id: int, run: int) -> None:
    from django.db import transaction

    from tomori.domain.models import Persona

    persona = Persona.objects.get(pk=persona_id)
    try:
        with transaction.atomic():
            persona.name = f"rolled back {run}"
            persona.save()
            raise RuntimeError("roll the savepoint back")
    except RuntimeError:
        pass
    persona.name = f"short-lived {run}"
    persona.save()


def _child(persona_id: int, run: int, out_dir: str) -> None:
    log = os.open(
        os.path.join(out_dir, f"{os.getpid()}.log"), os.O_WRONLY | os.O_CREAT, 0o644
    )
    os.dup2(log, 2)
    _write(persona_id, run)
    # Then out, as `manage.py` leaves: its connections closed (run_from_argv),
    # and SystemExit at the top level, the interpreter's own exit path.
    from django.db import connections

    connections.close_all()
    raise SystemExit(0)


def _reap(running: set[int]) -> None:
    pid, status = os.wait()
    running.discard(pid)
    print(pid, os.waitstatus_to_exitcode(status), flush=True)


def main() -> None:
    """Fork COUNT writers, AT_ONCE at a time; print each one's pid and exit code."""
    import django
    from django.db import connections

    django.setup()
    # Imported once here, not in every child (what a write pulls in lazily).
    import caches.bus.publisher  # noqa: F401
    import caches.outbox.store  # noqa: F401
    import tomori.domain.models  # noqa: F401

    gc.freeze()  # the children's collections (and exits) skip what they share

    persona_id, count, out_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    at_once = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    connections.close_all()  # a child must open its own connection
    running: set[int] = set()
    for run in range(count):
        if len(running) >= at_once:
            _reap(running)
        pid = os.fork()
        if pid == 0:
            _child(persona_id, run, out_dir)
        running.add(pid)
    while running:
        _reap(running)


if __name__ == "__main__":
    main()
