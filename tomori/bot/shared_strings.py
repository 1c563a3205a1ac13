"""One string object per distinct presence status in discord.py's member cache.

discord.py keeps a `ClientStatus` per cached member: the overall status and
one per platform ("online", "idle", "dnd", ...), each a new string parsed
from the gateway's JSON, so the production scenario's ~12,000 presences hold
~24,000 copies of a handful of words (about 55 bytes each). `install()`
makes `ClientStatus` keep the interned string instead: the same few
objects for every member. It wraps the two methods that set those slots
(`__init__` and `_update`; `_copy` copies references, so it shares them
already) and changes nothing else: the values read the same.

Installed once per process by the bot client (`tomori.bot.client`), before
any gateway event is parsed; installing again is a no-op.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from sys import intern
from typing import Any

from discord.presences import ClientStatus

_PLATFORMS = ("desktop", "mobile", "web")
_INSTALLED = "_tomori_shared_strings"


def _share(status: ClientStatus) -> None:
    # Only exact strings: intern refuses anything else, and an unexpected
    # value from the gateway must not break the parse of its event.
    value = status._status
    if type(value) is str:
        status._status = intern(value)
    for platform in _PLATFORMS:
        value = getattr(status, platform)
        if type(value) is str:
            setattr(status, platform, intern(value))


def _sharing(method: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(method)
    def wrapper(self: ClientStatus, *args: Any, **kwargs: Any) -> None:
        method(self, *args, **kwargs)
        _share(self)

    setattr(wrapper, _INSTALLED, True)
    return wrapper


def install() -> None:
    """Make every `ClientStatus` hold interned status strings (idempotent)."""
    if getattr(ClientStatus.__init__, _INSTALLED, False):
        return
    ClientStatus.__init__ = _sharing(ClientStatus.__init__)  # type: ignore[method-assign]
    ClientStatus._update = _sharing(ClientStatus._update)  # type: ignore[method-assign]


def installed() -> bool:
    """Tell whether `install` has run in this process."""
    return bool(getattr(ClientStatus.__init__, _INSTALLED, False))
