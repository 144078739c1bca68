"""``lora-share`` from a config alone: adapters injected at run start (seeded), through the real ``fedcore run``."""
import json
import textwrap

import pytest
from safetensors.torch import load_file
import torch

import fedcore
from fedcore.cli import main
from fedcore.data import synthetic_classification
from fedcore.models import micro_vit
from fedcore_lora import LoRAShare, adapter_keys, current_rank

CONFIG = textwrap.dedent("""
    name = "lora-share-micro-vit"
    rounds = 2
    num_clients = 3
    seed = 1
    dataset = { name = "synthetic", n = 60, n_test = 30 }
    model = { name = "micro-vit", embed_dim = 16, depth = 1, num_heads = 2 }

    [pipeline]
    split = { name = "lora-share", rank = 4 }
    local_update = { name = "sgd", lr = 0.05, epochs = 1 }
    """)


def test_fedcore_run_injects_adapters_from_the_config(capsys, tmp_path):
    path = tmp_path / "lora.toml"
    path.write_text(CONFIG)
    rc = main(["run", str(path), "--out", str(tmp_path / "run"), "--progress", "none"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["clients"] for r in rows)
    state = load_file(str(tmp_path / "run" / "model.safetensors"))
    factors = {k: v for k, v in state.items() if ".lora_A." in k}
    assert factors and all(v.shape[0] == 4 for v in factors.values())
    full = sum(v.numel() for v in state.values())
    assert rows[0]["bytes_up"] < 0.5 * 3 * 4 * full  # only factors + head travel


def test_injection_is_seeded_and_needs_a_rank():
    full = synthetic_classification(n=60, num_classes=4, seed=0)

    def final(seed):
        torch.manual_seed(0)
        model = micro_vit(num_classes=4, embed_dim=16, depth=1, num_heads=2)
        result = fedcore.Pipeline([LoRAShare(rank=3)]).run(model=model, train=full.subset(range(40)),
                                                           test=full.subset(range(40, 60)), num_clients=2,
                                                           rounds=1, seed=seed)
        return result.model

    a, b = final(0), final(0)
    assert current_rank(a) == 3 and all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in adapter_keys(a))
    torch.manual_seed(0)
    bare = micro_vit(num_classes=4, embed_dim=16, depth=1, num_heads=2)
    with pytest.raises(fedcore.ConfigError,
                       match=r"has no LoRA adapters; give the model a \[model.lora\] table .* or set LoRAShare.rank"):
        fedcore.Pipeline([LoRAShare()]).run(model=bare, train=full.subset(range(40)), test=full.subset(range(40, 60)),
                                            num_clients=2, rounds=1, seed=0)
