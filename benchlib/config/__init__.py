"""Parameters and what they name: BenchmarkParams (the one place a default lives), the model catalogue, the run plan. Imports paths, status, machine, store and backends."""
