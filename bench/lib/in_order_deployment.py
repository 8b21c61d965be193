"""Deployment entrypoint ``bench/lib/in_order_deployment.py:pbg``: the ``pbg`` flow with its
iteration subflows called in order (:mod:`bench.lib.in_order`), deployed by bench.pipeline."""

import flows.train
from bench.lib.in_order import use_in_order

use_in_order(flows.train)
pbg = flows.train.pbg
