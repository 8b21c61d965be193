"""examples/kg: each recipe config (and each tuned config of bench/configs) parses with the bench's
relative paths, the tuning example's space fits its config, and each recipe trains one epoch on its set.

The recipe's quality is the bench's to measure (bench.quality, docs/quality.md); here each config
goes through the real importer and one epoch of the real ``pbg`` flow on data/kg/<set>, with the
paths the README's commands use (relative to the work directory).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prefect.testing.utilities import prefect_test_harness

from flows.train import pbg
from pbg_core.config.space_checks import check_space
from storage.checkpoints import CheckpointStore
from storage.config_loader import load_config, load_search_space
from storage.importing.importer import import_edges
from storage.importing.options import ImportOptions

REPO = Path(__file__).resolve().parents[2]
SETS = ("umls", "kinships", "nations")
BENCH_PATHS = load_config(str(REPO / "bench" / "configs" / "kg_complex.py"))
# Every config bench.quality_recipe runs: the recipes (and the planted graph's) and the tuned configs.
BENCH_CONFIGS = [
    *(REPO / "examples" / "kg" / f"{name}.py" for name in (*SETS, "planted")),
    *sorted((REPO / "bench" / "configs").glob("tuned_*.json")),
]


@pytest.fixture(scope="module")
def harness() -> Iterator[None]:
    """A throw-away Prefect API for the flow runs of this module."""
    with prefect_test_harness(server_startup_timeout=180):
        yield


@pytest.mark.parametrize("path", BENCH_CONFIGS, ids=lambda path: path.name)
def test_the_config_parses_with_the_bench_relative_paths(path: Path) -> None:
    # The bench imports train, valid and test into edge_paths, in that order (the tuned config of
    # a study trains on train only: its best_config.json is edited to this layout).
    config = load_config(str(path))
    paths = ("entity_path", "edge_paths", "checkpoint_path")
    assert [getattr(config, p) for p in paths] == [getattr(BENCH_PATHS, p) for p in paths]
    assert config.operator_init == "normal"
    if path.parent.name == "kg":
        assert path.stem in (REPO / "examples" / "kg" / "README.md").read_text()


def test_the_tuning_example_space_fits_its_config() -> None:
    config = load_config(str(REPO / "examples" / "kg" / "kinships_tune.py"))
    space = load_search_space(str(REPO / "examples" / "kg" / "kinships-space.yaml"))
    check_space(space, config, source="kinships-space.yaml")
    assert config.edge_paths == ["edges/train"] and config.validation is not None
    assert config.validation.edge_path == "edges/valid"
    assert sorted(space.params) == ["batch_size", "lr", "num_epochs", "operator_init_scale", "regularization_coef"]


@pytest.mark.integration
@pytest.mark.parametrize("name", SETS)
def test_one_epoch_on_the_real_data_completes(
    name: str, harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config_file = str(REPO / "examples" / "kg" / f"{name}.py")
    splits = [str(REPO / "data" / "kg" / name / f"{split}.txt") for split in ("train", "valid", "test")]
    import_edges(load_config(config_file), splits, ImportOptions(lhs_col=0, rel_col=1, rhs_col=2), seed=0)
    config = load_config(config_file, ["edge_paths=edges/train", "num_epochs=1", "workers=1", "seed=0"])
    pbg(config=config)
    assert CheckpointStore(str(tmp_path / "checkpoints")).read_version() == 1
