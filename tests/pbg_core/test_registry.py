"""pbg_core.registry: registering, looking up, and the unknown-name message."""

from __future__ import annotations

import pytest

from pbg_core.errors import UnknownNameError
from pbg_core.registry import Registry


def _registry() -> Registry[type]:
    reg: Registry[type] = Registry("operator")

    @reg.register("translation")
    class Translation:
        pass

    reg.register("diagonal")(dict)
    return reg


def test_register_returns_the_object_and_get_finds_it() -> None:
    reg = _registry()
    assert reg.get("diagonal") is dict
    assert reg.get("translation").__name__ == "Translation"


def test_names_are_sorted_and_membership_and_iteration_follow_them() -> None:
    reg = _registry()
    assert reg.names() == ["diagonal", "translation"]
    assert list(reg) == ["diagonal", "translation"]
    assert "diagonal" in reg and "linear" not in reg and 3 not in reg


def test_unknown_name_suggests_the_closest_and_lists_all() -> None:
    with pytest.raises(UnknownNameError) as caught:
        _registry().get("translaton")
    assert str(caught.value) == (
        "unknown operator 'translaton' (did you mean 'translation'?); known: diagonal, translation"
    )


def test_unknown_name_without_a_close_match_has_no_hint() -> None:
    assert _registry().unknown_message("zzz") == "unknown operator 'zzz'; known: diagonal, translation"


def test_registering_a_name_twice_is_refused() -> None:
    reg = _registry()
    with pytest.raises(ValueError, match="operator 'diagonal' is already registered"):
        reg.register("diagonal")(list)
    assert reg.get("diagonal") is dict
