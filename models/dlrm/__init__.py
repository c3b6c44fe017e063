"""Embedding-parallel Flax DLRM trained with the compressed embedding all-to-all.

Modules: ``configs`` (``Config`` and presets), ``models`` (Flax NNX model), ``sharding``
(table placement), ``mesh`` (device mesh, host/device arrays), ``exchange`` (the one call site
of ``compressed_all_to_all``), ``error_bounds`` (the one boundary with the adaptive error
bound), ``step`` (the sharded train/eval steps), ``input_pipeline`` (Criteo readers, data
selection), ``synthetic`` (project-made Criteo-like data), ``checkpoints`` (orbax),
``metrics`` (the metrics.jsonl schema), ``plots``, ``netdev`` (host network counters),
``train`` (``train_and_evaluate(config, workdir)``: setup and the loop), ``flags`` (flags ->
Config), ``main`` (the command line). Run ``python -m models.dlrm.main --help``.
"""
