"""Row RMSNorm with a fixed pairwise fold (`compressor.rms_norm`): torch reference (`naive`)
and a Triton kernel for power-of-two widths."""
