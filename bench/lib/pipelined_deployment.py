"""Deployment entrypoint ``bench/lib/pipelined_deployment.py:pbg``: the ``pbg`` flow with its
iteration subflows pipelined (:mod:`bench.lib.pipelined`), deployed by bench.pipeline."""

import flows.train
from bench.lib.pipelined import use_pipelined

use_pipelined(flows.train)
pbg = flows.train.pbg
