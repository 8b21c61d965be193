"""Fixtures of the tests of ``pbg predict`` and ``pbg score``: two small trained models, built once per session.

``umls_model``: the bundled UMLS graph (one entity type, dynamic relations), ``drug_model``: two
entity types and standard relations; both imported and trained as
tests/flows/cli/_trained_models.py describes. Tests read them and never write into them.
"""

from __future__ import annotations

from typing import Any

import pytest
from _trained_models import TrainedModel, drug_model_in, umls_model_in


@pytest.fixture(scope="session")
def umls_model(tmp_path_factory: pytest.TempPathFactory, train_buckets: Any) -> TrainedModel:
    """The UMLS graph, imported and trained."""
    return umls_model_in(tmp_path_factory.mktemp("umls"), train_buckets)


@pytest.fixture(scope="session")
def drug_model(tmp_path_factory: pytest.TempPathFactory, train_buckets: Any) -> TrainedModel:
    """Two entity types, standard relations, imported and trained."""
    return drug_model_in(tmp_path_factory.mktemp("drugs"), train_buckets)
