"""The compressor's step in two Triton launches (`triton_kernels`: the latents, then the ring
update). Its reference is `compressor.Compressor.forward`'s torch path (`_forward_pairs`,
`pool_pair`, `rms_norm`): the same operations in the same order, except that the pooling's
exp is Triton's (see `triton_kernels`)."""
