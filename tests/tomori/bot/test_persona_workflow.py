"""Persona picker workflow: the avatar session cache's lifecycle for every outcome."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from tomori.bot import persona_workflow as wf
from tomori.bot.persona_workflow import (
    AvatarBytes,
    AvatarUrl,
    PickerOutcome,
    PickerResult,
    WorkflowOutcome,
    live_avatar_sessions,
    retry_persona_workflow,
    run_persona_picker_workflow,
)


@dataclass(frozen=True)
class Persona:
    id: int
    name: str
    avatar_url: str = ""


A, B, C = Persona(1, "A", "https://a"), Persona(2, "B"), Persona(3, "C")


class ScriptedInteraction:
    """A fake interaction whose picker renders follow a script of user actions.

    Each step is a PickerResult, or an exception to raise from the render.
    Every render visits the personas' avatars (one page holding them all) and
    records which session cache it was handed and what it already held.
    """

    def __init__(self, *steps: PickerResult | Exception) -> None:
        self.steps = list(steps)
        self.caches: list[Any] = []
        self.cached_before_render: list[int] = []
        self.live_during_render: list[int] = []

    async def render(self, interaction, locale, personas, avatars) -> PickerResult:
        assert interaction is self and locale == "ja"
        self.caches.append(avatars)
        self.cached_before_render.append(len(avatars))
        self.live_during_render.append(live_avatar_sessions())
        for index, persona in enumerate(personas):
            await avatars.avatar_for(index, persona)
        step = self.steps.pop(0)
        if isinstance(step, Exception):
            raise step
        return step


def selected(index: int) -> PickerResult:
    return PickerResult(PickerOutcome.SELECTED, index)


class Resolver:
    def __init__(self) -> None:
        self.calls: list[int] = []

    async def __call__(self, persona: Persona) -> AvatarUrl | AvatarBytes:
        self.calls.append(persona.id)
        if persona.avatar_url:
            return AvatarUrl(persona.avatar_url)
        return AvatarBytes(f"png-{persona.id}".encode())


async def run(
    script: ScriptedInteraction,
    on_selected: Callable[[wf.PersonaSelection], Any],
    personas=(A, B, C),
    resolver: Resolver | None = None,
) -> wf.WorkflowResult:
    return await run_persona_picker_workflow(
        script,
        "ja",
        personas=personas,
        on_selected=on_selected,
        render=script.render,
        resolve_avatar=resolver or Resolver(),
    )


async def finish(selection: wf.PersonaSelection) -> str:
    return f"picked {selection.persona.name}"


async def test_selected_run_returns_the_callback_value_and_releases() -> None:
    script = ScriptedInteraction(selected(1))
    result = await run(script, finish)
    assert (result.outcome, result.value) == (WorkflowOutcome.SELECTED, "picked B")
    assert script.live_during_render == [1]
    assert live_avatar_sessions() == 0
    assert len(script.caches[0]) == 0  # released caches hold nothing


@pytest.mark.parametrize(
    ("step", "outcome"),
    [
        (PickerResult(PickerOutcome.CANCELLED), WorkflowOutcome.CANCELLED),
        (PickerResult(PickerOutcome.TIMEOUT), WorkflowOutcome.TIMEOUT),
        (RuntimeError("render failed"), WorkflowOutcome.ERROR),
    ],
)
async def test_every_ending_releases_the_cache(step, outcome) -> None:
    script = ScriptedInteraction(step)
    result = await run(script, finish)
    assert result.outcome is outcome
    assert live_avatar_sessions() == 0


async def test_fatal_callback_error_ends_the_run_and_releases() -> None:
    async def explode(selection):
        raise ValueError("modal fatal")

    result = await run(ScriptedInteraction(selected(0)), explode)
    assert result.outcome is WorkflowOutcome.FATAL
    assert isinstance(result.error, ValueError)
    assert live_avatar_sessions() == 0


async def test_empty_persona_list_creates_no_session() -> None:
    script = ScriptedInteraction()
    result = await run(script, finish, personas=())
    assert result.outcome is WorkflowOutcome.EMPTY
    assert script.caches == [] and live_avatar_sessions() == 0


async def test_retry_keeps_the_cache_and_resolves_each_avatar_once() -> None:
    resolver = Resolver()
    script = ScriptedInteraction(selected(0), selected(2))
    answers = iter([retry_persona_workflow(), "done"])

    async def on_selected(selection):
        return next(answers)

    result = await run(script, on_selected, resolver=resolver)
    assert result.outcome is WorkflowOutcome.SELECTED
    assert script.caches[0] is script.caches[1]
    assert script.cached_before_render == [0, 3]
    assert sorted(resolver.calls) == [1, 2, 3]


async def test_retry_with_the_same_persona_order_keeps_the_cache() -> None:
    resolver = Resolver()
    script = ScriptedInteraction(selected(0), selected(0))
    renamed = (Persona(1, "A2", "https://a"), B, C)
    answers = iter([retry_persona_workflow(renamed), "done"])

    async def on_selected(selection):
        return next(answers)

    await run(script, on_selected, resolver=resolver)
    assert script.cached_before_render == [0, 3]
    assert len(resolver.calls) == 3


@pytest.mark.parametrize(
    "updated",
    [(B, A, C), (A, B), (A, B, C, Persona(4, "D"))],
    ids=["reordered", "removed", "added"],
)
async def test_retry_with_a_different_persona_order_clears_the_cache(updated) -> None:
    resolver = Resolver()
    script = ScriptedInteraction(selected(0), selected(0))
    answers = iter([retry_persona_workflow(updated), "done"])

    async def on_selected(selection):
        return next(answers)

    result = await run(script, on_selected, resolver=resolver)
    assert result.outcome is WorkflowOutcome.SELECTED
    assert script.caches[0] is script.caches[1]
    assert script.cached_before_render == [0, 0]
    assert len(resolver.calls) == 3 + len(updated)
    assert live_avatar_sessions() == 0


async def test_selection_carries_the_resolved_avatar() -> None:
    seen = []

    async def on_selected(selection):
        seen.append(selection.avatar)
        return None

    await run(ScriptedInteraction(selected(0)), on_selected)
    await run(ScriptedInteraction(selected(1)), on_selected)
    assert seen == [AvatarUrl("https://a"), AvatarBytes(b"png-2")]
    assert "png-2" not in repr(seen[1])


async def test_endless_retries_stop_with_an_error() -> None:
    script = ScriptedInteraction(*[selected(0)] * 3)

    async def always_retry(selection):
        return retry_persona_workflow()

    result = await run_persona_picker_workflow(
        script,
        "ja",
        personas=(A,),
        on_selected=always_retry,
        render=script.render,
        max_iterations=3,
    )
    assert result.outcome is WorkflowOutcome.ERROR
    assert live_avatar_sessions() == 0


async def test_the_cache_class_is_private() -> None:
    assert not hasattr(wf, "AvatarSessionCache")
    assert "_AvatarSessionCache" not in getattr(wf, "__all__", [])


async def test_run_without_a_renderer_refuses() -> None:
    with pytest.raises(RuntimeError, match="renderer"):
        await run_persona_picker_workflow(
            object(), "ja", personas=(A,), on_selected=finish
        )
