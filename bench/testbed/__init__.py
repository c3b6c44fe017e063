"""The rate-limited testbed and the cluster model checked against it.

``netns_bench`` runs the trainer (and TorchRec) over a rate-limited link in network
namespaces (root): one limited loopback, or two namespaces joined by a limited veth pair
(``synthetic_shards`` writes the data its runs share, ``run_summary`` sums up one run);
``netns_testbed`` builds the namespaces and counts the bytes that cross (``link_counters``
samples the counters during a run, per step); ``netns_results``
turns a result into speedups; ``step_time_check`` scores the step-time model
(``models.dlrm.cluster.step_time``) against the testbed (``step_time_inputs``: its inputs from
the committed results) and projects it to GPU clusters (``step_time_projections``).
"""
