"""In the benchmark kernel: the sweep over a grid, timing, statistics, memory, interference, the speed probe, FLOPs, the machine's peak. Imports the layers below launch."""
