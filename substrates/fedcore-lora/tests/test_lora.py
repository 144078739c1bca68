"""fedcore_lora: peft injection on a timm ViT, adapter state, rank changes (SVD / slice), shares and the ledger."""
import pytest
import torch

import fedcore
from fedcore.builtin import FedAvg, IIDPartition, SGDUpdate
from fedcore.errors import ConfigError
from fedcore.models import micro_vit
from fedcore.testing import ContractFixture, parametrize_with_checks, tiny_data
from fedcore_lora import (
    LoRAShare,
    adapter_keys,
    adapter_state,
    current_rank,
    find_targets,
    inject_lora,
    load_adapter_state,
    lora_layers,
    lora_numel_per_rank,
    merged_copy,
    product_mean,
    set_rank,
    truncate_factors,
)

torch.set_num_threads(1)


def small_vit(num_classes: int = 4):
    torch.manual_seed(0)
    return micro_vit(num_classes=num_classes, embed_dim=32, depth=2, num_heads=2)


def randomise_b(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in lora_layers(model).values():
            w = layer.lora_B["default"].weight
            w.copy_(torch.randn(w.shape, generator=g) * 0.1)


def test_inject_targets_block_linears_only_and_is_identity_at_init():
    model = small_vit()
    x = torch.randn(3, 1, 8, 8)
    before = model(x)
    targets = inject_lora(model, rank=3, seed=1)
    assert targets == [f"blocks.{b}.{n}" for b in range(2) for n in ("attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2")]
    assert current_rank(model) == 3
    assert torch.allclose(model(x), before)  # B = 0 at init
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == set(adapter_keys(model))
    layer = lora_layers(model)["blocks.0.attn.qkv"]
    assert layer.scaling["default"] == 1.0  # Eq. 6: no alpha/r scaling
    assert all(float(layer.lora_B["default"].weight.detach().abs().sum()) == 0 for layer in lora_layers(model).values())


def test_injection_is_seeded_and_std_matches():
    a, b = small_vit(), small_vit()
    inject_lora(a, rank=4, seed=7)
    inject_lora(b, rank=4, seed=7)
    assert all(torch.equal(adapter_state(a)[k], adapter_state(b)[k]) for k in adapter_keys(a))
    c = small_vit()
    inject_lora(c, rank=4, seed=7, init_std=0.5)
    std = torch.cat([layer.lora_A["default"].weight.detach().flatten() for layer in lora_layers(c).values()]).std()
    assert 0.4 < float(std) < 0.6


def test_bad_input_names_the_setting_and_what_the_model_has():
    with pytest.raises(ConfigError, match=r"target='nope' matches no nn.Linear .* blocks.0.attn.qkv"):
        inject_lora(small_vit(), target="nope", rank=2)
    with pytest.raises(ConfigError,
                       match=r"rank=40 exceeds min\(in_features, out_features\)=32 of layer 'blocks.0.attn.qkv'"):
        inject_lora(small_vit(), rank=40)
    with pytest.raises(ConfigError, match="not a valid regular expression"):
        find_targets(small_vit(), "(")
    mlp = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 8))
    with pytest.raises(ConfigError, match=r"its linear layers are: 1"):
        inject_lora(mlp, rank=2)


def test_svd_truncation_is_exact_above_true_rank_and_optimal_below():
    g = torch.Generator().manual_seed(0)
    b = torch.randn(20, 6, generator=g, dtype=torch.float64)
    a = torch.randn(6, 15, generator=g, dtype=torch.float64)
    dense = b @ a
    for r in (6,):
        b2, a2 = truncate_factors(b, a, r)
        assert torch.allclose(b2 @ a2, dense, atol=1e-10)
    u, s, vh = torch.linalg.svd(dense)
    for r in (1, 3, 5):
        b2, a2 = truncate_factors(b, a, r)
        best = (u[:, :r] * s[:r]) @ vh[:r]
        assert b2.shape == (20, r) and a2.shape == (r, 15)
        assert torch.allclose(b2 @ a2, best, atol=1e-9)
    # a rank-2 product stored in rank-6 factors survives truncation to 2 exactly
    low_b = torch.cat([b[:, :2], torch.zeros(20, 4, dtype=torch.float64)], 1)
    b2, a2 = truncate_factors(low_b, a, 2)
    assert torch.allclose(b2 @ a2, low_b @ a, atol=1e-10)
    bs, as_ = truncate_factors(b, a, 3, mode="slice")
    assert torch.equal(bs, b[:, :3]) and torch.equal(as_, a[:3])


def test_set_rank_round_trip_on_the_model():
    model = small_vit()
    inject_lora(model, rank=4, seed=0)
    randomise_b(model)
    x = torch.randn(5, 1, 8, 8)
    y4 = model(x)
    assert set_rank(model, 6)                       # grow: B A unchanged
    assert current_rank(model) == 6
    assert torch.allclose(model(x), y4, atol=1e-5)
    assert set_rank(model, 4)                       # back down: the true rank is 4, so exact
    assert torch.allclose(model(x), y4, atol=1e-5)
    assert not set_rank(model, 4)                   # no-op
    set_rank(model, 2)
    assert current_rank(model) == 2
    assert {k: tuple(v.shape) for k, v in adapter_state(model).items() if "blocks.0.attn.qkv" in k} == {
        "blocks.0.attn.qkv.lora_A.default.weight": (2, 32), "blocks.0.attn.qkv.lora_B.default.weight": (96, 2)}
    assert all(p.requires_grad for n, p in model.named_parameters() if "lora_" in n)
    with pytest.raises(ConfigError, match="r_t=64 exceeds"):
        set_rank(model, 64, setting="r_t")


def test_set_rank_keeps_the_factors_on_the_models_device():
    """A dry run plans an annealed SA-FedLoRA round on the meta device: the resized factors must stay there (and
    a model on a GPU must keep its factors on the GPU), not land on the CPU."""
    with torch.device("meta"):
        model = small_vit()
    inject_lora(model, rank=4, seed=0)
    assert set_rank(model, 2)
    weights = [w for layer in lora_layers(model).values()
               for w in (layer.lora_A["default"].weight, layer.lora_B["default"].weight)]
    assert {w.device.type for w in weights} == {"meta"}
    assert current_rank(model) == 2


def test_adapter_state_round_trip_and_merge():
    a, b = small_vit(), small_vit()
    inject_lora(a, rank=3, seed=0)
    inject_lora(b, rank=3, seed=1)
    randomise_b(a)
    load_adapter_state(b, adapter_state(a))
    x = torch.randn(4, 1, 8, 8)
    assert torch.allclose(a(x), b(x))
    merged = merged_copy(a)
    assert not lora_layers(merged)
    assert torch.allclose(merged(x), a(x), atol=1e-5)
    set_rank(b, 2)
    with pytest.raises(ValueError, match="set_rank"):
        load_adapter_state(b, adapter_state(a))


def test_product_mean_is_the_weighted_mean_of_products():
    g = torch.Generator().manual_seed(1)
    pairs = [(torch.randn(10, 2, generator=g, dtype=torch.float64), torch.randn(2, 8, generator=g, dtype=torch.float64))
             for _ in range(3)]
    w = [1.0, 2.0, 3.0]
    dense = sum(wi * (b @ a) for wi, (b, a) in zip(w, pairs)) / 6.0
    b, a = product_mean(pairs, w, rank=6)  # rank >= 3 x 2: exact
    assert torch.allclose(b @ a, dense, atol=1e-10)
    b, a = product_mean(pairs, w, rank=2)
    u, s, vh = torch.linalg.svd(dense)
    assert torch.allclose(b @ a, (u[:, :2] * s[:2]) @ vh[:2], atol=1e-9)


def lora_vit():
    model = small_vit()
    inject_lora(model, rank=2, seed=0)
    return model


@parametrize_with_checks([LoRAShare(), LoRAShare(extra="")], fixture=ContractFixture(model_factory=lora_vit))
def test_contract(component, check):
    check(component)


def test_ledger_counts_exactly_the_lora_share():
    model = lora_vit()
    train, test = tiny_data(n=60, n_test=20)
    pipe = fedcore.Pipeline([IIDPartition(), LoRAShare(), SGDUpdate(lr=0.05, epochs=1), FedAvg()])
    head = sum(p.numel() for n, p in model.named_parameters() if n.startswith("head."))
    per_direction = 4 * (2 * lora_numel_per_rank(model) + head)
    frozen = {k: v.clone() for k, v in model.state_dict().items() if "lora_" not in k and not k.startswith("head.")}
    result = pipe.run(model=model, train=train, test=test, num_clients=3, rounds=2, seed=0)
    for r in result.history.rows:
        assert r["bytes_up"] == r["bytes_down"] == 3 * per_direction
    assert all(torch.equal(result.model.state_dict()[k], v) for k, v in frozen.items())  # backbone frozen


def test_every_client_reads_the_one_frozen_backbone_and_trains_its_own_factors():
    """The share copies what the client trains (factors, head); the frozen backbone is the global model's own."""
    from fedcore_lora import lora_share

    model = lora_vit()
    one, two = (lora_share(model, c, None) for c in (0, 1))
    backbone = {k for k, p in model.named_parameters() if not p.requires_grad and not k.startswith("head.")}
    assert backbone and {k for k in one.upload} & backbone == set()
    for share in (one, two):
        own = dict(share.module.named_parameters())
        assert all(own[k] is p for k, p in model.named_parameters() if k in backbone)  # not a copy: the same tensor
        assert all(own[k] is not p for k, p in model.named_parameters() if k in share.upload)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = torch.randn(6, 1, 8, 8), torch.randint(0, 4, (6,))
    opt = torch.optim.SGD([p for p in one.module.parameters() if p.requires_grad], lr=0.5)
    one.module.train()
    torch.nn.functional.cross_entropy(one.module(x), y).backward()
    opt.step()
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())  # the global model is untouched
    mine, other = one.module.state_dict(), two.module.state_dict()
    assert any(not torch.equal(mine[k], other[k]) for k in one.upload)  # only the trained client moved
    assert all(p.grad is None for p in model.parameters())


def test_lora_share_without_adapters_is_a_clear_error():
    train, test = tiny_data(n=30, n_test=10)
    result = fedcore.Pipeline([LoRAShare()]).run
    with pytest.raises(ValueError, match="has no LoRA adapters"):
        result(model=small_vit(), train=train, test=test, num_clients=2, rounds=1)


def test_timm_swin_gets_the_same_default_targets():
    from timm.models.swin_transformer import SwinTransformer

    torch.manual_seed(0)
    model = SwinTransformer(img_size=16, patch_size=2, in_chans=1, num_classes=3, window_size=4, embed_dim=16,
                            depths=(1, 1), num_heads=(1, 2)).eval()
    x = torch.randn(2, 1, 16, 16)
    before = model(x)
    targets = inject_lora(model, rank=4, seed=0)
    assert targets == [f"layers.{s}.blocks.0.{n}"
                       for s in (0, 1) for n in ("attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2")]
    assert torch.allclose(model(x), before, atol=1e-6)
    randomise_b(model)
    y = model(x)
    set_rank(model, 2)
    set_rank(model, 4)
    assert current_rank(model) == 4 and model(x).shape == (2, 3)
    assert not torch.allclose(model(x), y)  # truncation to 2 lost the components beyond rank 2, growing kept BA
