"""Kernels paired with their torch references: one folder per op.

Each holds `naive.py` (the readable reference) and `triton_kernels.py`.
"""
