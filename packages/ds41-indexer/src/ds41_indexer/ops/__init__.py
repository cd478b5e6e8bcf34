"""Indexer kernels paired with their torch references: one folder per op."""
