"""SA-FedLoRA: settings validation, the round plan in a real run, exact ledger bytes, frozen backbone, baselines by
name."""
import pytest
import torch

import fedcore
from fedcore.data import ArrayDataset, synthetic_classification
from fedcore.errors import ConfigError
from fedcore.models import micro_vit, tiny_mlp
from fedcore.training import train_epochs
from fedcore.types import ClientData
from fedcore_lora import adapter_keys, has_lora, lora_numel_per_rank
from fedcore_safedlora import SAFedLoRAPlan, converged_cost, convergence_round, cost_to_target, reduction

torch.set_num_threads(1)
S = 3


def vit():
    torch.manual_seed(0)
    return micro_vit(num_classes=4, embed_dim=16, depth=1, num_heads=2)


def data():
    full = synthetic_classification(n=90, num_classes=4, seed=0)
    return full.subset(range(60)), full.subset(range(60, 90))


PLAN_KEYS = {"t1_rounds", "t2_rounds", "r_a", "r_b", "t_a", "t_b", "scheduler", "cosine_n", "rank_rounding",
             "truncation", "lora_target_modules", "lora_init_std"}
SHARE_KEYS = {"train_head_in_lora_stage", "head_pattern", "count_transition_broadcast"}


def as_recipe(config):
    """A 0.1 config (one multi-slot component under plugins) as its recipe, each setting to its component."""
    config = dict(config)
    (spec,) = config.pop("plugins")
    spec = dict(spec)
    name = spec.pop("name")
    if spec.pop("aggregation_mode", "factors") == "product_svd":
        config["aggregate"] = "lora-product-svd"
    plan = {k: spec.pop(k) for k in list(spec) if k in PLAN_KEYS}
    if plan:
        config["plugins"] = [{"name": "sa-fedlora-plan", **plan}]
    share = {k: spec.pop(k) for k in list(spec) if k in SHARE_KEYS}
    if share:
        config["split"] = share
    if spec:
        config["local_update"] = spec
    return {"recipe": name, **config}


def plan_of(settings):
    return SAFedLoRAPlan(**{k: v for k, v in settings.items() if k in PLAN_KEYS})


def run(config, rounds, model=None):
    train, test = data()
    pipe = fedcore.Pipeline.from_config(as_recipe(config))
    return pipe.run(model=model or vit(), train=train, test=test, num_clients=S, rounds=rounds, seed=0)


FAST = dict(name="sa-fedlora", t1_rounds=1, e1_local_epochs=1, t2_rounds=4, e2_local_epochs=1, r_a=3, r_b=2,
            t_a=1, t_b=2)


def test_settings_validation_names_the_setting():
    with pytest.raises(ConfigError, match=r"SAFedLoRAPlan.r_b=9 > SAFedLoRAPlan.r_a=8"):
        SAFedLoRAPlan(r_a=8, r_b=9)
    with pytest.raises(ConfigError, match=r"SAFedLoRAPlan.t_a=5 > SAFedLoRAPlan.t_b=3"):
        SAFedLoRAPlan(t_a=5, t_b=3)
    with pytest.raises(ConfigError, match=r"t_b=10 must be < t2_rounds=10"):
        SAFedLoRAPlan(t2_rounds=10, t_a=2, t_b=10)
    with pytest.raises(ConfigError, match="t1_rounds"):
        SAFedLoRAPlan(t1_rounds=-1)
    with pytest.raises(ConfigError, match="scheduler"):
        SAFedLoRAPlan(scheduler="exponential")
    with pytest.warns(UserWarning, match="1.5"):
        SAFedLoRAPlan(r_a=16, r_b=8)
    assert SAFedLoRAPlan(t2_rounds=80).phase_bounds == (2, 12)  # spec defaults 0.025*T2, 0.15*T2
    assert SAFedLoRAPlan(t2_rounds=50).phase_bounds == (1, 8)


def test_bad_model_or_pattern_fails_before_training():
    with pytest.raises(ConfigError, match=r"lora_target_modules='nothing' matches no nn.Linear .*blocks.0.attn.qkv"):
        run({"plugins": [dict(FAST, lora_target_modules="nothing")]}, 2)
    with pytest.raises(ConfigError, match=r"SAFedLoRAPlan.r_a=20 exceeds min\(in_features, out_features\)=16"):
        run({"plugins": [dict(FAST, r_a=20, r_b=16)]}, 2)
    with pytest.raises(ConfigError,
                       match=r"matches no nn.Linear module of this Sequential; its linear layers are: 1, 3"):
        run({"plugins": [FAST]}, 2, model=tiny_mlp(num_classes=4))


def test_head_pattern_must_match_and_ranks_must_agree():
    with pytest.raises(ConfigError,
                       match=r"head_pattern='\^classifier' matches no entry .*top-level entries: cls_token"):
        run({"plugins": [dict(FAST, head_pattern="^classifier")]}, 1)


def test_ablation_presets():
    m1 = SAFedLoRAPlan.ablation("M1", r_b=4, t2_rounds=10)
    assert (m1.t1_rounds, m1.r_a, m1.r_b) == (0, 4, 4)
    m2 = SAFedLoRAPlan.ablation("M2", r_a=6, r_b=4, t2_rounds=10)
    assert (m2.t1_rounds, m2.r_a) == (0, 6)
    m3 = SAFedLoRAPlan.ablation("M3", r_b=4, t2_rounds=10)
    assert m3.t1_rounds == 3 and m3.r_a == 4
    with pytest.raises(ConfigError, match="M5"):
        SAFedLoRAPlan.ablation("M5")


def test_round_plan_and_exact_ledger_bytes():
    model = vit()
    full = sum(p.numel() for p in model.parameters())
    entries = sum(v.numel() for v in model.state_dict().values())
    head = sum(p.numel() for n, p in model.named_parameters() if n.startswith("head."))
    component = plan_of(FAST)
    result = run({"plugins": [FAST]}, 5, model=model)
    rows = result.history.rows
    per_rank = lora_numel_per_rank(result.model)
    assert [r["stage"] for r in rows] == [1, 2, 2, 2, 2]
    assert [r["lora_rank"] for r in rows] == [0, 3, 3, 2, 2] == [component.rank_at(t) or 0 for t in range(5)]
    # initiating round: the full model both ways (ViT has no buffers, so parameters = state entries)
    assert rows[0]["bytes_down"] == S * 4 * entries and rows[0]["bytes_up"] == S * 4 * full
    # stage switch: the backbone is broadcast once (count_transition_broadcast), factors + head come back
    lora3 = 4 * (3 * per_rank + head)
    assert rows[1]["bytes_up"] == S * lora3
    # the final model holds rank-2 factors; round 1 sent every entry with rank-3 factors
    assert rows[1]["bytes_down"] == S * 4 * (sum(v.numel() for v in result.model.state_dict().values()) + per_rank)
    # LoRA rounds: 2 * S * 4 * (r_t * sum(d_in + d_out) + |head|)
    assert rows[2]["bytes_up"] == rows[2]["bytes_down"] == S * lora3
    assert rows[3]["bytes_up"] == rows[3]["bytes_down"] == S * 4 * (2 * per_rank + head)
    assert rows[3]["bytes_up"] / (S * 4 * full) < 0.25


def test_no_transition_broadcast_and_no_head():
    cfg = dict(FAST, count_transition_broadcast=False, train_head_in_lora_stage=False)
    result = run({"plugins": [cfg]}, 3)
    per_rank = lora_numel_per_rank(result.model)
    assert result.history.rows[1]["bytes_down"] == S * 4 * 3 * per_rank


def test_lora_stage_trains_only_factors_and_head():
    model = vit()
    result = run({"plugins": [dict(FAST, t1_rounds=0)]}, 1, model=model)
    before = vit().state_dict()
    after = result.model.state_dict()
    changed = {k for k in after if k in before and not torch.equal(after[k], before[k])}
    assert changed == {"head.weight", "head.bias"}  # base weights are bit-identical
    for k in adapter_keys(result.model):
        if ".lora_B." in k:
            assert after[k].abs().sum() > 0  # B left zero init: the factors trained


def test_product_svd_runs_and_keeps_rank():
    result = run({"plugins": [dict(FAST, t1_rounds=0, aggregation_mode="product_svd")]}, 3)
    assert has_lora(result.model) and result.history.rows[-1]["lora_rank"] == 2


def test_proximal_term_gradient_is_mu_times_distance():
    """Plain SGD, 2 batches: the mu run differs from the mu=0 run at step 2 by exactly -lr*mu*(W1 - W0)."""
    torch.manual_seed(0)
    x = torch.randn(8, 1, 8, 8)
    y = torch.randint(0, 4, (8,))
    ds = ArrayDataset(x, y)
    net = tiny_mlp(num_classes=4)
    lr, mu, seed = 0.1, 0.5, 3
    first = torch.randperm(8, generator=torch.Generator().manual_seed(seed))[:4].tolist()

    def trained(indices, m):
        model = __import__("copy").deepcopy(net)
        train_epochs(model, ClientData(dataset=ds, indices=indices), epochs=1, lr=lr, momentum=0.0, batch_size=4,
                     clip_norm=0.0, mu=m or None, generator=torch.Generator().manual_seed(seed))
        return dict(model.named_parameters())

    w0 = dict(net.named_parameters())
    w1 = trained(first, 0.0)
    plain, prox = trained(range(8), 0.0), trained(range(8), mu)
    for k in w0:
        expected = -lr * mu * (w1[k] - w0[k])
        assert torch.allclose(prox[k] - plain[k], expected, atol=1e-6)


BASELINES = [
    {"plugins": [{"name": "fedfft", "epochs": 1}]},
    {"plugins": [{"name": "fedavg-scratch", "epochs": 1}]},
    {"plugins": [{"name": "fedbit", "epochs": 1}]},
    {"plugins": [{"name": "fedper", "epochs": 1}]},
    {"plugins": [{"name": "local", "epochs": 1}]},
    {"plugins": [{"name": "fedlora", "r_a": 2, "r_b": 2, "t2_rounds": 4, "e2_local_epochs": 1}]},
    {"partition": {"name": "dirichlet", "alpha": 0.5, "min_size": 5}, "plugins": [FAST]},
]


@pytest.mark.parametrize("config", BASELINES, ids=lambda c: c["plugins"][0]["name"])
def test_runs_by_name_from_a_config_dict(config):
    model = vit()
    result = run(config, 2, model=model)
    rows = result.history.rows
    assert len(rows) == 2 and all(0.0 <= r["test_accuracy"] <= 1.0 for r in rows)
    name = config["plugins"][0]["name"]
    params = dict(vit().named_parameters())
    if name == "fedbit":
        sent = sum(p.numel() for n, p in params.items() if n.endswith(".bias") or n.startswith("head."))
        assert rows[0]["bytes_up"] == S * 4 * sent
    if name == "fedper":
        sent = sum(p.numel() for n, p in params.items() if not n.startswith("head."))
        assert rows[1]["bytes_up"] == S * 4 * sent  # the personal head never crosses the network
        assert all(set(s.tensors) == {"head.weight", "head.bias"} for s in result.run.client_states.values())
        assert "test_accuracy_local" in rows[-1]
    if name == "local":
        assert rows[-1]["bytes_up_total"] == rows[-1]["bytes_down_total"] == 0
    if name == "fedavg-scratch":
        assert not torch.equal(result.model.state_dict()["pos_embed"], vit().state_dict()["pos_embed"])


def test_paper_cost_arithmetic():
    # Tab. 2: CC 92.91 % and TC 93.62 % below FedAvg; Tab. 3 Face CC 91.27 %
    assert round(100 * reduction(2.69, 37.94), 2) == 92.91
    assert round(100 * reduction(2.42, 37.94), 2) == 93.62
    assert round(100 * reduction(3.45, 39.51), 2) == 91.27
    hist = [{"round": t, "test_accuracy": a, "bytes_up_total": 10 * (t + 1), "bytes_down_total": 10 * (t + 1)}
            for t, a in enumerate([0.5, 0.8, 0.908, 0.897, 0.91])]
    assert cost_to_target(hist, 0.85) == 60 and cost_to_target(hist, 0.91) == 100 and cost_to_target(hist, 0.95) is None
    assert convergence_round(hist) == 2 and converged_cost(hist) == 60


def test_same_seed_same_global_state_across_the_stage_switch():
    a = run({"plugins": [FAST]}, 2).model.state_dict()
    b = run({"plugins": [FAST]}, 2).model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("mode", ["svd", "slice"])
def test_round_start_truncates_the_global_factors(mode):
    from fedcore.testing import ContractFixture, build_engine, round_context
    from fedcore_lora import lora_layers

    component = plan_of({**FAST, "t1_rounds": 0, "truncation": mode})
    engine = build_engine([component], ContractFixture(model_factory=vit, data_factory=data, num_clients=S))
    model = engine.run_ctx.server.model
    component.fedcore_round_start(ctx=round_context(engine, 0))  # injects at r_a = 3
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for layer in lora_layers(model).values():
            layer.lora_B["default"].weight.copy_(torch.randn(layer.lora_B["default"].weight.shape, generator=g))
    before = {n: (layer.lora_B["default"].weight @ layer.lora_A["default"].weight).detach().double()
              for n, layer in lora_layers(model).items()}
    factors = {n: (layer.lora_B["default"].weight.detach().clone(), layer.lora_A["default"].weight.detach().clone())
               for n, layer in lora_layers(model).items()}
    component.fedcore_round_start(ctx=round_context(engine, 2))  # t_b = 2: rank 2
    for n, layer in lora_layers(model).items():
        b, a = layer.lora_B["default"].weight.detach().double(), layer.lora_A["default"].weight.detach().double()
        assert a.shape[0] == 2
        if mode == "svd":
            u, s, vh = torch.linalg.svd(before[n])
            assert torch.allclose(b @ a, (u[:, :2] * s[:2]) @ vh[:2], atol=1e-4)
        else:  # slice keeps the leading columns of B and rows of A
            assert torch.equal(b.float(), factors[n][0][:, :2]) and torch.equal(a.float(), factors[n][1][:2])


def test_old_component_names_point_to_the_recipe():
    with pytest.raises(fedcore.UnknownComponentError,
                       match=r"'sa-fedlora' is a recipe .* recipe = \"sa-fedlora\" in TOML"):
        fedcore.Pipeline.from_config({"plugins": [{"name": "sa-fedlora", "r_a": 3}]})
    import fedcore_safedlora

    with pytest.raises(AttributeError, match=r"FedPer was removed in 0.1.1: the method is the recipe 'fedper'"):
        fedcore_safedlora.FedPer  # noqa: B018


def test_naming_a_recipe_plugin_again_changes_its_settings():
    from fedcore.recipes import get_recipe

    config = get_recipe("fedlora").config({"plugins": [{"name": "sa-fedlora-plan", "r_a": 4, "r_b": 4}]})
    assert config["plugins"] == [{"name": "sa-fedlora-plan", "t1_rounds": 0, "r_a": 4, "r_b": 4}]
    config = get_recipe("fedlora").config({"plugins": ["from-scratch"]})
    assert [p if isinstance(p, str) else p["name"] for p in config["plugins"]] == ["sa-fedlora-plan", "from-scratch"]
