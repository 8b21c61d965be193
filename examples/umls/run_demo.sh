#!/usr/bin/env bash
# The demo on the embedded defaults: import the bundled UMLS graph, train it with
# the `pbg` flow (Prefect's ephemeral API, SQLite, local disk), print filtered
# test metrics. Run from anywhere: `make demo` or `bash examples/umls/run_demo.sh`.
set -euo pipefail
cd "$(dirname "$0")/../.."
PBG=.venv/bin/pbg
CONFIG=examples/umls/config.py
DATA=demo-out/umls/data
EPOCHS=${EPOCHS:-50}

rm -rf demo-out/umls
echo "== import data/kg/umls (train, valid, test; seed 0: the entity order is shuffled, as PBG does)"
$PBG import $CONFIG data/kg/umls/train.txt data/kg/umls/valid.txt data/kg/umls/test.txt \
    --lhs-col 0 --rel-col 1 --rhs-col 2 -p seed=0
echo "== train on all of train.txt for $EPOCHS epochs (seed 0)"
# eval_fraction=0: every training edge trains, as PBG's FB15k example does "to reproduce results"
# (the config holds 5 % out so that deployed runs show MRR while training; here test.txt is judged).
$PBG train $CONFIG -p edge_paths=$DATA/train_partitioned -p num_epochs=$EPOCHS -p seed=0 -p eval_fraction=0
echo "== filtered evaluation on test.txt (filtering train, valid and test; seed 0: auc samples its negatives)"
$PBG eval $CONFIG -p edge_paths=$DATA/test_partitioned \
    -p relations.0.all_negs=true -p num_uniform_negs=0 -p seed=0 \
    --filtered --filter-path $DATA/train_partitioned --filter-path $DATA/valid_partitioned \
    --filter-path $DATA/test_partitioned
