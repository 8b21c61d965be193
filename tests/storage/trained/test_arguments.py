"""storage.trained.arguments: the default relation and the checks of a version, each refusal one line."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pbg_core.errors import UsageError
from storage.trained.arguments import check_version, default_relation


def test_a_relation_is_taken_by_default_only_when_the_model_has_one() -> None:
    assert default_relation(False, ["treats"], None, "--relation NAME") == "treats"
    assert default_relation(False, ["treats", "interacts"], "interacts", "--relation NAME") == "interacts"
    assert default_relation(True, ["isa"], "isa", "--relation NAME") == "isa"
    with pytest.raises(UsageError) as caught:
        default_relation(False, ["treats", "interacts"], None, "relation or rel_col")
    assert str(caught.value) == (
        "the model has 2 relations, so there is no default one: give relation or rel_col; its relations: treats, "
        "interacts"
    )
    with pytest.raises(
        UsageError, match=r"^the model has dynamic relations, so .*: r0, r1, .*, r9, \.\.\. \(12 in all\)$"
    ):
        default_relation(True, [f"r{i}" for i in range(12)], None, "--relation NAME")


@pytest.mark.parametrize("version", [None, 1, 7, np.int64(3)])
def test_a_version_from_1_is_allowed(version: Any) -> None:
    check_version(version)


@pytest.mark.parametrize("version", [0, -1, True, 2.0, "3"])
def test_any_other_version_is_a_usage_error(version: Any) -> None:
    with pytest.raises(UsageError) as caught:
        check_version(version)
    assert str(caught.value) == f"version={version!r} is not allowed; give a whole number >= 1, or None for the latest"
