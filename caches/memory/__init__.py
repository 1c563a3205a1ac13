"""Process memory in one place: the guard, the emergency clear, libvips, the readers.

``readers`` measures (process RSS, Python heap, container limit, host procfs),
``vips`` sets and reads libvips' native limits, ``guard`` classifies RSS against
the limit and runs ``emergency`` on entering critical. Nothing here imports
``metrics``: metrics read these figures, and register the metric sink the
emergency clear reports through (``caches.telemetry``).
"""

#: Bytes in a mebibyte: the one definition every memory figure in the project uses.
MIB = 1024 * 1024
