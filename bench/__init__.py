"""Benchmarks of jax_lossy_comm, run from the repository root as ``python -m bench.NAME``.

Entry points (each ``--help`` lists its options):

* ``codec_bench``: the codec benchmark, the library's forms beside the peer codecs of the one
  registry on the real dumps (``--suite peers`` -> results/peers.json; ``--suite targets`` ->
  results/codec.json, the codec's side-by-side targets).
* ``codec_bench_gpu``: the library's forms on a GPU, many calls per jitted function, beside a
  device copy.
* ``exchange_bench``: raw vs compressed all-to-all on DLRM-shaped data (8 virtual devices).
* ``train_compare``: DLRM training with the exact, compressed and quantized-comm exchanges.
* ``netns_bench``: DLRM step time over a rate-limited link in network namespaces (root):
  one limited loopback, or two namespaces ("nodes") joined by a limited veth pair, with
  TorchRec beside the library (``torchrec_peer``, run in its own venv).
* ``report``: runs the above and renders every table and figure from the JSON results
  (``--report-only`` re-renders without running anything).
* ``plot_schedules``: the error-bound schedules figure of docs/error_bound.md.

Library modules: ``bench_util`` (timing, dumps, environment record, JSON), ``registry`` (the
codec registry), ``quant_codes`` (the quantization peer), ``pareto`` (Pareto analysis),
``figures`` (plots), ``codec_tables`` and ``link_tables`` (the report's Markdown tables),
``netns_testbed`` (network namespaces, rate-limited links, link counters) and
``netns_results`` (speedups and summaries of a netns result).
"""
