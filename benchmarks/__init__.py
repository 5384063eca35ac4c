"""Synapse's benchmarks: ``python -m benchmarks [--quick] [--smoke]``.

Every figure is measured in the same run as its baseline, over several
repetitions; the median is reported with the min and max. Results are printed
as a table and written to ``benchmarks/results/latest.json`` (a full run of
every group; other runs write ``partial.json`` beside it). See
``docs/performance.md`` for what each figure measures and what dominates it.
"""
