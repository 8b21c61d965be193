"""Start a run from ``init_path`` by entity name, not by position (docs/formats.md, "Names record").

After a plain re-import the entity files list the names in another order, often in other
partitions, so ``init_path``'s row at (partition, offset) is another entity's. Before training,
the run compares ``init_path``'s names record (:mod:`storage.checkpoint_names`) with the entity
files; where they differ it writes, once, the start files of the entity types (and dynamic
relations) that moved into ``init_by_name/`` of its checkpoint directory: each entity that
``init_path`` trained at its trained row, wherever it is now, the others fresh. Every process of
the run (a cluster's machines included) then reads its start from there.

- :mod:`storage.remap.matching`: names of both sides, joined by name (pyarrow, no Python object per name);
- :mod:`storage.remap.rows`: one entity type's rows moved, one partition in memory at a time;
- :mod:`storage.remap.relation_params`: dynamic relations' operator parameters moved by relation name;
- :mod:`storage.remap.start`: the ``init_by_name/`` directory, its record, and the store a session reads;
- :mod:`storage.remap.prepare`: all of it for one run.
"""
