"""pbg_core: the PyTorch-BigGraph training engine, pure torch/numpy/pydantic.

No Prefect, fsspec or h5py here and no file I/O: storage reaches the engine only
through the Protocols in :mod:`pbg_core.ports`.
"""
