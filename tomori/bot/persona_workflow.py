"""Persona picker workflow runner and its per-run avatar session cache (spec 16).

One `run_persona_picker_workflow(...)` call owns one avatar session cache: it
is created before the retry loop, handed to the picker renderer on every
iteration, kept across `retry_persona_workflow()` directives and released when
the run ends, whatever the outcome. A retry that supplies personas whose ids
differ by absolute index (added, removed, reordered) clears it before the next
render, since its keys are indexes. The cache class is private: command code
declares retry intent and never builds, imports or passes the cache.

The picker UI itself (pages, buttons, modals) is the injected renderer; the
bot worker installs the discord.py one with `install_picker_renderer`, tests
pass a scripted fake.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

logger = logging.getLogger(__name__)


class HasId(Protocol):
    """A persona as the workflow sees it: anything with an `id`."""

    @property
    def id(self) -> int: ...


@dataclass(frozen=True, slots=True)
class AvatarUrl:
    """A public (or fallback) avatar URL."""

    url: str


@dataclass(frozen=True, slots=True)
class AvatarBytes:
    """A local-disk avatar, attached to the Discord message as a file."""

    data: bytes
    filename: str = "avatar.png"

    def __repr__(self) -> str:
        return f"AvatarBytes({len(self.data)} bytes, {self.filename!r})"


AvatarValue = AvatarUrl | AvatarBytes
AvatarResolver = Callable[[Any], Awaitable[AvatarValue | None]]

_live_sessions = 0


def live_avatar_sessions() -> int:
    """Return how many avatar session caches are alive (workflows running now)."""
    return _live_sessions


class _AvatarSessionCache:
    """Avatars of one workflow run, keyed by absolute persona index."""

    __slots__ = ("_entries", "_resolve", "_released", "resolutions")

    def __init__(self, resolve: AvatarResolver) -> None:
        global _live_sessions
        self._entries: dict[int, AvatarValue | None] = {}
        self._resolve = resolve
        self._released = False
        self.resolutions = 0
        _live_sessions += 1

    def __len__(self) -> int:
        return len(self._entries)

    async def avatar_for(self, index: int, persona: Any) -> AvatarValue | None:
        """Return the avatar of the persona at `index`, resolving it once."""
        if index in self._entries:
            return self._entries[index]
        self.resolutions += 1
        value = await self._resolve(persona)
        self._entries[index] = value
        return value

    def clear(self) -> None:
        """Forget every avatar (the persona order changed)."""
        self._entries.clear()

    def release(self) -> None:
        """End the session: drop the avatars and stop counting it as live."""
        global _live_sessions
        if not self._released:
            self._released = True
            self._entries.clear()
            _live_sessions -= 1


class AvatarSource(Protocol):
    """What a renderer may do with the session cache it is handed."""

    async def avatar_for(self, index: int, persona: Any) -> AvatarValue | None: ...


class PickerOutcome(enum.Enum):
    """How one picker render ended."""

    SELECTED = "selected"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"


@dataclass(frozen=True, slots=True)
class PickerResult:
    """A renderer's answer: the outcome and, when selected, the persona index."""

    outcome: PickerOutcome
    index: int | None = None


class PickerRenderer(Protocol):
    """Render the picker for `personas` and wait for the user's choice."""

    def __call__(
        self,
        interaction: Any,
        locale: str,
        personas: Sequence[Any],
        avatars: AvatarSource,
    ) -> Awaitable[PickerResult]: ...


class WorkflowOutcome(enum.Enum):
    """How a whole workflow run ended."""

    SELECTED = "selected"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    EMPTY = "empty"
    ERROR = "error"
    FATAL = "fatal"


@dataclass(frozen=True, slots=True)
class WorkflowResult:
    """The outcome of a run, the selection callback's value and any error."""

    outcome: WorkflowOutcome
    value: Any = None
    error: BaseException | None = None


@dataclass(frozen=True, slots=True)
class RetryDirective:
    """Returned by a selection callback: show the picker again."""

    updated_personas: tuple[Any, ...] | None = None


def retry_persona_workflow(
    updated_personas: Sequence[Any] | None = None,
) -> RetryDirective:
    """Return the directive that reopens the picker, optionally with new personas."""
    if updated_personas is None:
        return RetryDirective()
    return RetryDirective(updated_personas=tuple(updated_personas))


@dataclass(frozen=True, slots=True)
class PersonaSelection:
    """What the selection callback receives."""

    interaction: Any
    locale: str
    index: int
    persona: Any
    avatar: AvatarValue | None


OnSelected = Callable[[PersonaSelection], Awaitable[Any]]

_default_renderer: PickerRenderer | None = None


def install_picker_renderer(renderer: PickerRenderer | None) -> None:
    """Set the renderer runs use when they are not given one (the bot's UI)."""
    global _default_renderer
    _default_renderer = renderer


async def _no_avatar(persona: Any) -> AvatarValue | None:
    url = getattr(persona, "avatar_url", "")
    return AvatarUrl(url) if url else None


def _same_identity(old: Sequence[Any], new: Sequence[Any]) -> bool:
    return [p.id for p in old] == [p.id for p in new]


async def run_persona_picker_workflow(
    interaction: Any,
    locale: str,
    *,
    personas: Sequence[Any],
    on_selected: OnSelected,
    render: PickerRenderer | None = None,
    resolve_avatar: AvatarResolver = _no_avatar,
    max_iterations: int = 50,
) -> WorkflowResult:
    """Run the picker until a selection completes or the user gives up.

    `on_selected` returns `retry_persona_workflow(...)` to reopen the picker
    (the avatar session cache is kept), or any other value to finish with
    SELECTED. An exception from it ends the run as FATAL, one from the
    renderer as ERROR. The cache is released on every outcome.
    """
    renderer = render or _default_renderer
    if renderer is None:
        raise RuntimeError("no persona picker renderer is installed")
    current = tuple(personas)
    if not current:
        return WorkflowResult(WorkflowOutcome.EMPTY)
    cache = _AvatarSessionCache(resolve_avatar)
    try:
        return await _loop(
            interaction, locale, current, on_selected, renderer, cache, max_iterations
        )
    finally:
        cache.release()


async def _loop(
    interaction: Any,
    locale: str,
    personas: tuple[Any, ...],
    on_selected: OnSelected,
    renderer: PickerRenderer,
    cache: _AvatarSessionCache,
    max_iterations: int,
) -> WorkflowResult:
    for _ in range(max_iterations):
        try:
            picked = await renderer(interaction, locale, personas, cache)
        except Exception as error:
            logger.warning("persona picker failed: %s", type(error).__name__)
            return WorkflowResult(WorkflowOutcome.ERROR, error=error)
        if picked.outcome is not PickerOutcome.SELECTED or picked.index is None:
            return WorkflowResult(WorkflowOutcome(picked.outcome.value))
        index = picked.index
        avatar = await cache.avatar_for(index, personas[index])
        selection = PersonaSelection(
            interaction, locale, index, personas[index], avatar
        )
        try:
            answer = await on_selected(selection)
        except Exception as error:
            return WorkflowResult(WorkflowOutcome.FATAL, error=error)
        if not isinstance(answer, RetryDirective):
            return WorkflowResult(WorkflowOutcome.SELECTED, value=answer)
        personas = _next_personas(personas, answer, cache)
        if not personas:
            return WorkflowResult(WorkflowOutcome.EMPTY)
    endless = RuntimeError(f"persona workflow retried more than {max_iterations} times")
    return WorkflowResult(WorkflowOutcome.ERROR, error=endless)


def _next_personas(
    personas: tuple[Any, ...], retry: RetryDirective, cache: _AvatarSessionCache
) -> tuple[Any, ...]:
    if retry.updated_personas is None:
        return personas
    if not _same_identity(personas, retry.updated_personas):
        # Keys are absolute indexes: after a removal, addition or reorder an
        # index names another persona, so every cached avatar may be wrong.
        cache.clear()
    return retry.updated_personas


__all__ = [
    "AvatarBytes",
    "AvatarSource",
    "AvatarUrl",
    "AvatarValue",
    "PersonaSelection",
    "PickerOutcome",
    "PickerRenderer",
    "PickerResult",
    "RetryDirective",
    "WorkflowOutcome",
    "WorkflowResult",
    "install_picker_renderer",
    "live_avatar_sessions",
    "retry_persona_workflow",
    "run_persona_picker_workflow",
]
