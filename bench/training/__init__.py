"""Exchange and training benchmarks: the compressed all-to-all and the DLRM trainer.

``exchange_bench`` (raw vs compressed all-to-all on DLRM-shaped data), ``exchange_compile``
(compile time and program size against ``jax.lax.all_to_all``), ``packed_padding`` (bytes of
the packed path), ``train_compare`` (training with every exchange side by side, over seeds; ``fidelity`` its
statistics over seeds and their page),
``torchrec_peer`` (TorchRec's DLRM as a peer, in its own venv; ``torchrec_data`` its data,
``torchrec_init`` its dense model set up as the library's), ``input_bench`` (the readers,
the preprocessing and the shard loader).
"""
