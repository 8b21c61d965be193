"""storage.trained.model: a checkpoint that does not fit its names or config, and a config that would score otherwise.

A partition file whose shape is not (its names' count, the config's dimension) is refused by every
answer that reads it, in one line naming the file, both shapes and where the expected one comes
from; a config or override changing how the trained model scores is refused at load. Every
refusal leaves the files byte-identical.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import pytest
from disk_state import changes, tree_state
from small_models import DISEASES, DRUGS, committed, graph_edges, imported, raw_config

from pbg_core.config import parse_config
from pbg_core.errors import ShapeError, UsageError
from storage.checkpoint_names import DIGEST_ATTR, read_digest
from storage.trained import Model
from storage.trained.loading import load_version
from storage.trained.similarity import SimilarEntities


def swapped(tmp_path: Path, record: bool) -> dict[str, Any]:
    """A committed model whose ``drug`` partition 0 file is a copy of ``disease`` partition 0's (13 rows
    where its names are 15), its names record (``record``) kept as the drug partition's; the config."""
    raw = raw_config(tmp_path)
    imported(parse_config(raw), tmp_path / "edges.tsv", graph_edges())
    committed(parse_config(raw), record=record)
    ckpt = Path(raw["checkpoint_path"])
    drug = ckpt / "embeddings_drug_0.v1.h5"
    digest = read_digest(str(drug))
    shutil.copyfile(ckpt / "embeddings_disease_0.v1.h5", drug)
    if digest is not None:
        with h5py.File(drug, "r+") as hf:
            hf.attrs[DIGEST_ATTR] = digest
    return raw


def every_read(model: Model, raw: dict[str, Any]) -> dict[str, Callable[[], object]]:
    """Each answer reading drug rows: anchors looked up, whole partitions ranked, scores, neighbours, exports."""

    def index() -> object:
        loaded = load_version(model.config, None)
        return SimilarEntities(loaded.embedder, loaded.reader, flat_max_rows=4, counts=loaded.names.counts).index(
            "drug"
        )

    return {
        "anchors": lambda: model.predict(heads=DRUGS, relations="treats", k=2),
        "partitions": lambda: model.predict(tail="diabetes", relation="treats", k=2),
        "score": lambda: model.score(DRUGS, "treats", [DISEASES[0]] * len(DRUGS)),
        "similar": lambda: model.similar(DRUGS, k=2),
        "index": index,
        "embeddings": lambda: list(model.embeddings("drug")),
    }


@pytest.mark.parametrize("record", [True, False], ids=["names record", "PBG's, no record"])
def test_a_partition_of_other_rows_is_refused_by_every_answer(tmp_path: Path, record: bool) -> None:
    raw = swapped(tmp_path, record)
    model = Model.load(raw)
    names = (
        f"{raw['checkpoint_path']}/names/" if record else f"{raw['entity_path']}/entity_names_drug_0.json"
    )  # the checkpoint's own list, or the entity files' for rows without a record
    before = tree_state(tmp_path)
    for what, read in every_read(model, raw).items():
        with pytest.raises(ShapeError) as caught:
            read()
        message = str(caught.value)
        assert "\n" not in message, what
        assert message.startswith(f"{raw['checkpoint_path']}/embeddings_drug_0.v1.h5: stored embeddings have shape "
                                  "(13, 6), expected (15, 6): the 15 names of entity type 'drug' partition 0 "
                                  f"(listed in {names}"), (what, message)  # fmt: skip
        assert message.endswith("and the config's dimension 6 (a file of another entity type, import or checkpoint, "
                                "or another config?)"), what  # fmt: skip
    assert model.similar("diabetes", k=2)  # the other files still answer
    assert changes(before, tree_state(tmp_path)) == []


def test_a_partition_of_another_dimension_is_refused(tmp_path: Path) -> None:
    raw = raw_config(tmp_path)
    imported(parse_config(raw), tmp_path / "edges.tsv", graph_edges())
    committed(parse_config(raw))
    other = raw_config(tmp_path / "wide", dimension=8)
    committed(parse_config({**other, "entity_path": raw["entity_path"]}))
    shutil.copyfile(
        Path(other["checkpoint_path"]) / "embeddings_drug_1.v1.h5", tmp_path / "ckpt/embeddings_drug_1.v1.h5"
    )
    model = Model.load(raw)
    before = tree_state(tmp_path)
    with pytest.raises(ShapeError, match=r"embeddings_drug_1.v1.h5: stored embeddings have shape \(15, 8\), expected "
                       r"\(15, 6\): the 15 names .* and the config's dimension 6 "):  # fmt: skip
        model.similar(DRUGS, k=2)
    assert changes(before, tree_state(tmp_path)) == []


SCORING = [
    ("comparator=cos", 'comparator "dot" (this config: "cos")'),
    ("bias=true", "bias false (this config: true)"),
    ("max_norm=1.5", "max_norm null (this config: 1.5)"),
    ("global_emb=false", "global_emb true (this config: false)"),
    ("relations.1.operator=diagonal", 'relations[1].operator "translation" (this config: "diagonal")'),
    ("relations.0.rhs=drug", 'relations[0].rhs "disease" (this config: "drug")'),
    ("entities.drug.num_partitions=1", "entities.drug.num_partitions 2 (this config: 1)"),
    ("dimension=8", "dimension 6 (this config: 8)"),
]


@pytest.mark.parametrize(("override", "named"), SCORING, ids=[o for o, _ in SCORING])
def test_an_override_changing_the_scores_is_refused(tmp_path: Path, override: str, named: str) -> None:
    raw = raw_config(tmp_path)
    imported(parse_config(raw), tmp_path / "edges.tsv", graph_edges())
    committed(parse_config(raw))
    before = tree_state(tmp_path)
    for source in (raw, raw["checkpoint_path"]):
        with pytest.raises(ShapeError) as caught:
            Model.load(source, overrides=[override])
        message = str(caught.value)
        assert "\n" not in message and named in message, message
        assert message.startswith(f"loaded checkpoint {raw['checkpoint_path']} version 1 was trained with ")
        assert message.endswith("load it with the config it was trained with (without overrides of these fields), "
                                "or load its checkpoint directory itself")  # fmt: skip
    assert changes(before, tree_state(tmp_path)) == []


def test_fields_that_do_not_change_scores_may_differ(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    raw = raw_config(tmp_path)
    imported(parse_config(raw), tmp_path / "edges.tsv", graph_edges())
    committed(parse_config(raw))
    plain = Model.load(raw).predict(head="aspirin", relation="treats", k=3)
    changed = ["lr=0.5", "num_epochs=99", "loss_fn=softmax", "margin=0.3", "workers=1"]
    assert Model.load(raw, overrides=changed).predict(head="aspirin", relation="treats", k=3) == plain
    assert not [r for r in caplog.records if r.levelname == "WARNING"]  # nothing to warn about: answers are the same


@pytest.mark.parametrize("version", [0, -1, True, 1.0, "1"])
def test_a_version_that_is_not_a_whole_number_from_1_is_a_usage_error(tmp_path: Path, version: Any) -> None:
    raw = raw_config(tmp_path)
    before = tree_state(tmp_path)
    with pytest.raises(
        UsageError,
        match=re.escape(f"version={version!r} is not allowed; give a whole number >= 1, or None for the latest"),
    ):
        Model.load(raw, version=version)
    assert changes(before, tree_state(tmp_path)) == []
