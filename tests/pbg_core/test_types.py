"""pbg_core.types: sides, buckets, and the lazily resolved tensor aliases."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pbg_core import types
from pbg_core.types import Bucket, Side


def test_side_pick_other_and_key() -> None:
    assert Side.LHS.pick("l", "r") == "l" and Side.RHS.pick("l", "r") == "r"
    assert Side.LHS.other is Side.RHS and Side.RHS.other is Side.LHS
    assert (Side.LHS.key, Side.RHS.key) == ("lhs", "rhs")


def test_bucket_partition_per_side_and_pbg_string_form() -> None:
    bucket = Bucket(lhs=2, rhs=5)
    assert (bucket.get_partition(Side.LHS), bucket.get_partition(Side.RHS)) == (2, 5)
    assert str(bucket) == "( 2 , 5 )"


def test_tensor_aliases_resolve_to_torch_and_unknown_names_raise() -> None:
    import torch

    assert types.FloatTensorType is torch.Tensor
    assert types.ModuleStateDict == dict[str, torch.Tensor]
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchAlias'"):
        _ = types.NoSuchAlias  # the point: an unknown name


def test_importing_types_does_not_load_torch() -> None:
    """The importer uses names and buckets only; loading torch would cost it ~1 s per process."""
    code = "import sys, pbg_core.types; assert 'torch' not in sys.modules, 'torch loaded'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
