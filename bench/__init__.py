"""Benchmarks of jax_lossy_comm, run from the repository root as ``python -m bench.GROUP.NAME``.

Grouped by what they measure (each entry point's ``--help`` lists its options):

* ``bench.codecs``: the codec in isolation. ``codec_bench`` (the library's forms beside the
  peer codecs of the one ``registry`` on the real dumps; ``codec_targets`` its side-by-side
  timings and targets, ``codec_rows`` its rows' bound verdicts; the entries: ``codec_entry``,
  ``peer_codecs``, ``jax_codecs``), ``codec_bench_gpu`` (GB/s on a GPU beside a device copy),
  ``quant_codes`` (the quantization peer), ``pareto``, ``half_type_capacity``,
  ``dcn_pooled_stats``.
* ``bench.training``: the exchange and training. ``exchange_bench`` (raw vs compressed
  all-to-all), ``exchange_compile`` (compile time and program size), ``packed_padding``,
  ``train_compare`` (DLRM training with every exchange side by side; ``fidelity`` its
  statistics over seeds), ``torchrec_peer``
  (TorchRec's DLRM, in its own venv; ``torchrec_data`` its data, ``torchrec_init`` its
  initialization and Adagrad as the library's), ``input_bench`` (readers and shard loader).
* ``bench.testbed``: the rate-limited testbed and the cluster model. ``netns_bench`` (DLRM
  step time over a limited link in network namespaces, root; ``synthetic_shards`` the data its
  runs share, ``run_summary`` one run's summary), ``netns_testbed`` (namespaces,
  links, counters), ``link_counters`` (the counters sampled during a run, per step),
  ``netns_results`` (speedups), ``step_time_check`` (the step-time model against the testbed;
  ``step_time_inputs`` its inputs, ``step_time_projections`` its GPU cluster projections).
* ``bench.reports``: ``report`` (runs the benchmarks, renders every table and figure;
  ``--report-only`` re-renders), ``codec_tables`` and ``link_tables`` (its Markdown tables),
  ``figures`` (plots), ``plot_schedules`` (the error-bound schedules figure).

``bench_util`` holds what every group shares (timing, dumps, environment record, JSON);
``trainer_runs`` the trainer's command and environment as the training benchmarks run it;
``gpu_check.sh`` is the one-shot GPU check; ``results/`` the committed JSON and Markdown.
"""
