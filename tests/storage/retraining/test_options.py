"""storage.retraining.options: the ``retrain`` parameter of the pbg-retrain flow, a frozen validated form."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from storage.retraining.options import RetrainOptions


def test_options_are_a_frozen_validated_form() -> None:
    assert RetrainOptions() == RetrainOptions(keep_last=3, init_from_previous=True)
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        RetrainOptions(keep_last=0)
    with pytest.raises(ValidationError, match="keep_latest"):
        RetrainOptions(keep_latest=2)
    with pytest.raises(ValidationError, match="frozen"):
        RetrainOptions().keep_last = 5
    schema = RetrainOptions.model_json_schema()["properties"]
    assert schema["keep_last"]["minimum"] == 1 and schema["keep_last"]["default"] == 3
    assert all(prop["description"] for prop in schema.values())
