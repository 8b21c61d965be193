"""The benchmarks' seeded graph generators, each cached by its parameters beside its files.

- :mod:`~bench.lib.graphs.powerlaw`: a power-law multigraph as ``n<i>\\tr<k>\\tn<j>`` lines;
- :mod:`~bench.lib.graphs.kg`: a knowledge graph's shape (Zipf relations, hubs, train/test);
- :mod:`~bench.lib.graphs.planted_kg`: a knowledge graph with planted types and relation maps, to learn;
- :mod:`~bench.lib.graphs.chung_lu`: a LiveJournal-shaped simple graph with planted communities;
- :mod:`~bench.lib.graphs.days`: that graph cut into days of arrivals, for retraining.

The first two run on their own: ``python -m bench.lib.graphs.powerlaw --out g.tsv``,
``python -m bench.lib.graphs.kg --out kg.tsv``.
"""
