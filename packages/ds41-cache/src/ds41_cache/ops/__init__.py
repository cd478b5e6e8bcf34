"""Kernels paired with their torch references: one folder per op (`naive.py` + `triton_kernels.py`)."""
