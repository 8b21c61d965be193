"""What scores an edge: operators, comparators, losses, regularizers, negatives, the model.

Imports the foundations, ``pbg_core.config`` and ``pbg_core.kernels``; never training,
parallel or session code (the model knows nothing of batches' gradients or workers).

- :mod:`.operators`, :mod:`.comparators`, :mod:`.losses`, :mod:`.regularizers`: PBG's
  registries of each, as torch modules;
- :mod:`.operator_init`: how the operators' parameters start (PBG's identity, or a seeded normal draw);
- :mod:`.negatives`: negative-sampling modes and chunk layouts;
- :mod:`.max_norm`: PBG's ``max_norm`` lookups (renorm rows, in the table too);
- :mod:`.row_blocks`: padding rows so a row scores the same bits in any block;
- :mod:`.param_names`: the parameters' private (state dict) and public (checkpoint) names;
- :mod:`.embedder`: :class:`~pbg_core.model.embedder.MultiRelationEmbedder`, which
  scores a batch's sides, and ranks every entity of a partition (evaluation, answers).
"""
