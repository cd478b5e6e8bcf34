"""Kernels paired with their torch references: one folder per op (naive + triton_kernels)."""
