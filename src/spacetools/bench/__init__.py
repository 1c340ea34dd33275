"""Benchmarks: the verl parquet dataset layout, the SpatialSim generator, evaluation and reports."""
