"""Embedding-parallel Flax DLRM trained with the compressed embedding all-to-all.

Modules: ``configs`` (presets), ``models`` (Flax NNX model), ``sharding`` (table
placement), ``exchange`` (the one call site of ``compressed_all_to_all``),
``error_bounds`` (adaptive error-bound hook), ``input_pipeline`` (Criteo readers),
``synthetic`` (project-made Criteo-like data), ``train`` (steps, loop, checkpoints),
``main`` (flags). Run ``python -m models.dlrm.train --help``.
"""
