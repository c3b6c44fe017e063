"""Reports: the one report generator and what it renders.

``report`` runs the benchmarks (each in its own subprocess) and renders every table and
figure from the JSON results; ``codec_tables`` and ``link_tables`` are its Markdown tables,
``figures`` its plots; ``plot_schedules`` draws the error-bound schedules of
docs/error_bound.md.
"""
