"""storage: PBG-compatible files (entities, edges, checkpoints, stats) through fsspec + h5py.

Every store takes a URL (local path, ``file://``, ``s3://``) plus optional fsspec
``storage_options``; :mod:`storage.fs` is the only module that resolves URLs.

Import what you use from its module (``from storage.checkpoints import CheckpointStore``):
this package re-exports nothing, so importing one module loads only what that module needs
(the checkpoint and edge stores load torch; ``pbg import`` and the file helpers do not).
"""
