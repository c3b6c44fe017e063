"""The trainer: an embedding-parallel Flax DLRM trained with the compressed embedding all-to-all.

Follows the Flax examples' layout: ``main`` (the command line) and ``flags`` (generated from
the ``Config`` fields) -> ``configs`` (``Config``, presets, the paper's error-bound tiers) ->
``train.train_and_evaluate(config, workdir)``; ``step`` (the sharded train/eval steps),
``models`` (Flax NNX model: dot or DCN-v2 interaction), ``sharding`` (table placement),
``mesh`` (device mesh, host/device arrays), ``checkpoints`` (orbax), ``metrics`` (the
metrics.jsonl schema), ``plots``, ``processes`` (process start-up, peer loss); the library's
call sites ``pooled_all_to_all`` (``compressed_all_to_all`` of the pooled embeddings) and
``grad_allreduce`` (``compressed_psum`` of the dense gradients). Two sub-packages hold the
other concerns: ``data`` (readers, preprocessing, shards, synthetic data) and ``cluster``
(the step-time model and ``--compression auto``). Run ``python -m models.dlrm.main --help``.
"""
