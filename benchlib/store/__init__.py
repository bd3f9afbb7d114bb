"""The run folder's format: every file name (layout), results.csv, environment.json, machine_limits.json, the cell in flight, the lock. Imports paths, status and machine only."""
