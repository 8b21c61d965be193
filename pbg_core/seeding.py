"""Deterministic seed derivation.

Every random stream of a run (initialisation, bucket order, eval holdout,
shuffles, negative sampling per worker) gets its own seed derived from the run
seed and a tuple of names/indexes. Derivation uses BLAKE2, not Python's
``hash``, so it is stable across processes and interpreter runs.
"""

from __future__ import annotations

import hashlib
import os
import random

import torch


def fresh_seed() -> int:
    """A random 63-bit seed for runs whose config sets no ``seed``."""
    return int.from_bytes(os.urandom(8), "little") >> 1


def derive_seed(base: int, *parts: object) -> int:
    """A 63-bit seed determined by ``base`` and ``parts`` (ints/strings)."""
    text = repr((int(base), *parts)).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") >> 1


def torch_generator(base: int, *parts: object) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded with ``derive_seed(base, *parts)``."""
    generator = torch.Generator()
    generator.manual_seed(derive_seed(base, *parts))
    return generator


def python_rng(base: int, *parts: object) -> random.Random:
    """A ``random.Random`` seeded with ``derive_seed(base, *parts)``."""
    return random.Random(derive_seed(base, *parts))
