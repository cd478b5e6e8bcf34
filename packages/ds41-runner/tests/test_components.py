"""Component declarations: read from the object's own class body only."""

import pytest

from ds41_runner import components as c
from ds41_runner.model import Model, ModelConfig


def test_concrete_classes_declare_in_their_own_body():
    for cls, expected in (
        (c.InvariantTritonAttention, True),
        (c.SplitKVTritonAttention, False),
        (c.TorchAttention, True),
        (c.Fp32FusedIndexer, True),
        (c.Bf16Indexer, False),
        (c.RingCompressor, True),
    ):
        assert "batch_invariant" in cls.__dict__
        assert c.declares_batch_invariant(cls()) is expected


def test_subclass_and_wrapper_do_not_inherit():
    class Tweaked(c.TorchAttention):
        pass

    class Restated(c.TorchAttention):
        batch_invariant = True

    class Wrapper:
        def __init__(self, inner):
            self.inner = inner
            self.batch_invariant = True  # an instance attribute is not a class declaration

        def __call__(self, *a, **k):
            return self.inner(*a, **k)

    assert c.declares_batch_invariant(Tweaked()) is False
    assert c.declares_batch_invariant(Restated()) is True
    assert c.declares_batch_invariant(Wrapper(c.TorchAttention())) is False
    assert c.declares_batch_invariant(c.AttentionImpl()) is False  # the base declares nothing

    class Truthy(c.TorchAttention):
        batch_invariant = 1  # must be exactly True

    assert c.declares_batch_invariant(Truthy()) is False


def test_model_bi_refuses_undeclared_components():
    cfg = ModelConfig.preset("tiny")

    class Tweaked(c.TorchAttention):
        pass

    with pytest.raises(ValueError, match="attention_impl=Tweaked"):
        Model(cfg, mode="bi", attention_impl=Tweaked())
    with pytest.raises(ValueError, match="indexer_impl=Bf16Indexer"):
        Model(cfg, mode="bi", indexer_impl="bf16")
    with pytest.raises(ValueError, match="compressor_impl"):
        Model(cfg, mode="bi", compressor_impl=type("Mine", (c.RingCompressor,), {})())
    # The same components are accepted in fast mode.
    m = Model(cfg, mode="fast", attention_impl=Tweaked(), indexer_impl="bf16")
    assert isinstance(m.attention_impl, Tweaked)


def test_names_and_defaults():
    cfg = ModelConfig.preset("tiny")
    m = Model(cfg)
    assert isinstance(m.attention_impl, c.TorchAttention)
    assert isinstance(m.indexer_impl, c.Fp32FusedIndexer)
    assert isinstance(m.compressor_impl, c.RingCompressor)
    fast = Model(cfg, mode="fast")
    assert isinstance(fast.indexer_impl, c.Bf16Indexer)
    with pytest.raises(ValueError, match="attention_impl must be one of"):
        Model(cfg, attention_impl="flash")
