"""What one timed call is. Today the study's forward pass (`forward`); each workload says how a cell's
inputs are made, what the timed call runs, and what its output is checked against."""
