"""Embedding-parallel Flax DLRM trained with the compressed embedding all-to-all.

Modules: ``configs`` (``Config``, presets, ``error_bound_presets``: the paper's tiers),
``models`` (Flax NNX model), ``sharding`` (table placement), ``mesh`` (device mesh,
host/device arrays), ``exchange`` (the one call site of ``compressed_all_to_all``), ``step``
(the sharded train/eval steps; ``ErrorBoundHook``, the step's per-table bounds from the
library's adaptive error bound), ``input_pipeline`` (Criteo readers, data
selection), ``synthetic`` (project-made Criteo-like data), ``checkpoints`` (orbax),
``metrics`` (the metrics.jsonl schema), ``plots``, ``netdev`` (host network counters),
``train`` (``train_and_evaluate(config, workdir)``: setup and the loop), ``flags`` (flags
generated from the Config fields), ``processes`` (process start-up, peer loss), ``main`` (the
command line). Run ``python -m models.dlrm.main --help``.
"""
