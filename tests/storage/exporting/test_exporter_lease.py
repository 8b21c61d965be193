"""The exporters read entity_path as readers (storage.entity_lease): not while an import writes it
(that no import starts while a reader holds its file: tests/storage/test_entity_lease.py)."""

from __future__ import annotations

import pytest
from disk_state import changes, tree_state
from store_io import StorePath
from test_exporter import make_config, write_standard_checkpoint

from storage.entity_lease import importing, reader_files
from storage.exporting.exporter import export_embeddings, export_tsv
from storage.layout import READERS_DIR
from storage.lease import LeaseHeldError


def test_an_export_is_refused_while_an_import_writes_the_names(root: StorePath) -> None:
    config = make_config(root)
    write_standard_checkpoint(config)
    with importing(config.entity_path, "pbg import config.json day2.tsv --append"):
        before = tree_state(str(root))
        with pytest.raises(LeaseHeldError, match="is being imported into by run 'pbg import config.json day2.tsv"):
            export_embeddings(config, str(root / "export"), "npy")
        with pytest.raises(LeaseHeldError, match="is being imported into"):
            export_tsv(config, str(root / "entities.tsv"), str(root / "relations.tsv"))
        assert changes(before, tree_state(str(root))) == []
    export_embeddings(config, str(root / "export"), "npy")  # the import is done
    assert reader_files(config.entity_path) == [] and not (root / "entities" / READERS_DIR).exists()
