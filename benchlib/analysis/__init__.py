"""A run's rows as pandas tables: runs, comparisons, significance, speed-ups, efficiency, quality, the 2019 claims, compare. Imports the layers below report."""
