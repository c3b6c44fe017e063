"""The cluster model: the step time of a run predicted from its mesh and links, and the
automatic exchange choice (``--compression auto``) built on it.

``step_time`` is the model (compute, exchange, all-reduce, overlap; calibration), with its
inputs and presets in ``step_time_inputs`` and the collective cost formulas in
``collective_cost``; ``auto_exchange`` is the pure choice among exact, flat and hierarchical
compression, ``probe_result`` what the probe measured and ``auto_report`` what the run logs
about the choice; ``exchange_probe`` measures what the choice needs on the run's own mesh
(link bandwidth and latency, codec speed, compute); ``netdev`` reads the host's network
counters. See docs/step_time.md.
"""
