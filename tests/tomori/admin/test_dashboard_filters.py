"""The dashboard's template filters: a cache name may break after its underscores, escaped."""

from __future__ import annotations

from tomori.templatetags.cache_dashboard import breakable


def test_a_cache_name_may_break_after_each_underscore() -> None:
    assert breakable("persona_sprite_message") == "persona_<wbr>sprite_<wbr>message"
    assert breakable("llm") == "llm"


def test_a_name_is_escaped_before_the_breaks_are_added() -> None:
    assert breakable("<b>_x") == "&lt;b&gt;_<wbr>x"
