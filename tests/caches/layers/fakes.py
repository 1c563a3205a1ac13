"""Repository records built in memory, for layer tests that need no database."""

from __future__ import annotations

from tomori.domain.repositories.llms import LlmRecord
from tomori.domain.repositories.servers import (
    PersonaRecord,
    ServerRecord,
    TomoriStateRows,
)


def tomori_rows(server_disc_id: int, *, persona: str = "Tomori") -> TomoriStateRows:
    """Return the rows of a server whose only persona (the main one) is `persona`."""
    server_id = server_disc_id % 1_000_000 + 1
    return TomoriStateRows(
        server=ServerRecord(
            id=server_id,
            server_disc_id=server_disc_id,
            name="fake",
            tool_use_enabled=True,
            emoji_usage_enabled=True,
            sticker_usage_enabled=True,
            channel_whitelist_enabled=False,
        ),
        model_config=None,
        personas=(
            PersonaRecord(
                id=server_id,
                server_id=server_id,
                name=persona,
                is_main=True,
                position=0,
                llm_id=None,
                system_prompt="",
                avatar_url="",
                tools_enabled=True,
            ),
        ),
    )


def llm_record(llm_id: int) -> LlmRecord:
    """Return an active openrouter llm row with this id."""
    return LlmRecord(
        id=llm_id,
        provider="openrouter",
        codename=f"model-{llm_id}",
        display_name=f"Model {llm_id}",
        is_default=llm_id == 0,
        is_active=True,
        supports_tools=True,
        supports_vision=False,
        context_length=8192,
    )
