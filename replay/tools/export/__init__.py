"""``triton-tap export``: captures in formats other tools read (Parquet, for DuckDB, Spark, Trino)."""
