"""The llms table: every row, for warming the LLM cache, and writes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from tomori.domain.models import Llm
from tomori.domain.repositories._fields import build, save_changes

LLM_FIELDS = (
    "display_name",
    "is_default",
    "is_active",
    "supports_tools",
    "supports_vision",
    "context_length",
)


@dataclass(frozen=True, slots=True)
class LlmRecord:
    """An LLM row as the caches see it."""

    id: int
    provider: str
    codename: str
    display_name: str
    is_default: bool
    is_active: bool
    supports_tools: bool
    supports_vision: bool
    context_length: int | None


def llm_record(row: Llm) -> LlmRecord:
    """Return the immutable snapshot of an llms row."""
    return LlmRecord(
        id=row.pk,
        provider=row.provider,
        codename=row.codename,
        **{name: getattr(row, name) for name in LLM_FIELDS},
    )


def list_llms() -> tuple[LlmRecord, ...]:
    """Return every llms row, by provider and codename."""
    return tuple(
        llm_record(row) for row in Llm.objects.order_by("provider", "codename")
    )


# Writes.


def llm_create(*, provider: str, codename: str, **fields: Any) -> LlmRecord:
    """Create an llms row."""
    row = build(Llm, LLM_FIELDS, fields, provider=provider, codename=codename)
    row.save()
    return llm_record(row)


def llm_update(*, llm_id: int, **fields: Any) -> LlmRecord:
    """Change an llms row (flags, display name, context length)."""
    row = Llm.objects.get(pk=llm_id)
    save_changes(row, LLM_FIELDS, fields)
    return llm_record(row)


def llm_set_default(*, llm_id: int) -> None:
    """Make this LLM its provider's only default."""
    with transaction.atomic():
        row = Llm.objects.select_for_update().get(pk=llm_id)
        for other in Llm.objects.filter(provider=row.provider, is_default=True):
            if other.pk != row.pk:
                other.is_default = False
                other.save(update_fields=["is_default"])
        if not row.is_default:
            row.is_default = True
            row.save(update_fields=["is_default"])
