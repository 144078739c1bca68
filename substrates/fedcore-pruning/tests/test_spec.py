"""SubmodelSpec validation: every bad input gets one clear error."""
import pytest

from fedcore.errors import ConfigError
from fedcore_pruning import SubmodelSpec


def test_full_spec_keeps_everything(shape):
    spec = SubmodelSpec.full(shape)
    assert spec.kept_depth == 4 and spec.head and spec.embeddings_trainable
    assert all(len(k.heads) == 4 and len(k.hidden) == 64 and len(k.attn_out) == 32 for k in spec.blocks)
    assert spec.classes == tuple(range(10))


def test_indices_are_sorted_and_default_head_follows_depth(shape):
    spec = SubmodelSpec.build(shape, window_start=1, window_length=2, heads=[[3, 1], None, [2]], exits=[3])
    assert spec.blocks[0].heads == (1, 3) and not spec.head
    assert [spec.is_trainable_block(b) for b in range(3)] == [False, True, True]


@pytest.mark.parametrize("kwargs, message", [
    (dict(window_start=3, window_length=2), r"window \[3, 5\) lies outside the model's depth 4"),
    (dict(window_start=-1), "lies outside"),
    (dict(window_length=0), "lies outside"),
    (dict(heads=[list(range(5))] * 4), "block 0 keeps 5 heads; the block has only 4"),
    (dict(heads=[[]] * 4), "block 0 heads is empty"),
    (dict(hidden=[None, [], None, None]), "block 1 hidden is empty"),
    (dict(mlp_out=[None, None, None, []]), "block 3 mlp_out is empty"),
    (dict(heads=[[0, 0]] + [None] * 3), "repeated"),
    (dict(attn_out=[[40]] + [None] * 3), r"outside \[0, 32\)"),
    (dict(heads=[[0]] * 3), "heads has 3 entries; expected one per kept block \\(4\\)"),
    (dict(classes=[]), "classes is empty"),
    (dict(classes=[10]), "outside"),
    (dict(window_start=1, window_length=2, exits=[1]), r"exits has depth 1; .*\(1, 3\]"),
    (dict(window_start=0, window_length=2, exits=[2, 1]), "increasing"),
    (dict(window_length=2, head=True, exits=[2]), "head=True needs the full depth 4"),
    (dict(window_length=2), "no output"),
])
def test_bad_specs_name_the_problem(shape, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        SubmodelSpec.build(shape, **kwargs)


def test_direct_construction_is_validated_too(shape):
    good = SubmodelSpec.full(shape)
    with pytest.raises(ConfigError, match="blocks has 3 entries"):
        SubmodelSpec(shape=shape, window_start=0, window_length=4, blocks=good.blocks[:3], classes=good.classes,
                     exits=(), head=True)
