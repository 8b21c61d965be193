"""storage.retraining: the files of scheduled retraining (the ``pbg-retrain`` flow, docs/retraining.md).

Under a retraining root (the config's ``checkpoint_path``; names in :mod:`storage.layout`): one
checkpoint directory per flow run (:mod:`.run_dirs`, complete or not: :mod:`.run_complete`), its
``retrain.json`` (:mod:`.state`), the promoted run's ``latest.json`` (:mod:`.latest`) and the
deletion of old runs (:mod:`.pruning`). Beside the import: what arrived and was received
(:mod:`.arrivals`, :mod:`.received`, the import's typed :mod:`.generations`), the holdout split
(:mod:`.holdout`), where a run starts (:mod:`.start`), its own config (:mod:`.run_config`), the
options (:mod:`.options`), the gate's verdict (:mod:`.gate`) and a run in words (:mod:`.report`).

May import the stores and :mod:`storage.fs`, never :mod:`storage.importing` (the task joins the two,
:mod:`tasks.retrain`); the layers inside are held by an import-linter contract (pyproject.toml).
"""
