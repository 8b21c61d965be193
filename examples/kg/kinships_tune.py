"""The Kinships recipe (kinships.py) as the base config of a tuning study (docs/tuning.md).

kinships.py with a ``validation`` section (filtered MRR of the valid split every 5 epochs,
filtering train, valid and test) and ``edge_paths`` the train split only, so that trials train
on train and are judged on valid. Run from the work directory of examples/kg/README.md:
``pbg tune ../../../examples/kg/kinships_tune.py --space ../../../examples/kg/kinships-space.yaml
--trials 30 --parallel 2``.
"""

import importlib.util
from pathlib import Path

_RECIPE = Path(__file__).with_name("kinships.py")


def get_torchbiggraph_config():
    spec = importlib.util.spec_from_file_location("kinships_recipe", _RECIPE)
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    config = recipe.get_torchbiggraph_config()
    config["edge_paths"] = ["edges/train"]
    config["validation"] = {
        "edge_path": "edges/valid",
        "every_epochs": 5,
        "filter_paths": ["edges/train", "edges/valid", "edges/test"],
    }
    return config
