"""Codec benchmarks: the library's codec in isolation, beside peer codecs on the real dumps.

``codec_bench`` runs every codec of the one ``registry`` (the library's forms, zstd, SZ3-like
quantization, TorchRec's precisions), ``codec_targets`` its side-by-side timings and the codec's
targets, ``codec_rows`` its rows' bound verdicts (shared with the report); the registry's
entries are ``codec_entry.Codec`` objects made by ``peer_codecs`` (zstd, quantization codes,
SZ3, ZFP, FBGEMM, a copy) and ``jax_codecs`` (JAX casts, the library's baselines and forms);
``codec_bench_gpu`` measures GB/s on a GPU beside a device-to-device copy; ``quant_codes`` is
the quantization-without-prediction peer; ``pareto`` finds the codecs no other beats;
``half_type_capacity`` and ``dcn_pooled_stats`` study the fixed-rate capacity of half types and
the DCNv2 preset's pooled embeddings.
"""
