"""Record split runs from the multi-slot classes (main 44879aa) for the recipe bit-identity test."""
import hashlib
import json
import sys

import torch

from fedcore.testing import ContractFixture, run_tiny_pipeline, tiny_data
from fedcore_fedv import FedV, FedVZ
from fedcore_split import SplitFedV1, SplitFedV2, VanillaSL

WALL = ("wall_s", "round_wall_s")

def small_vit():
    from fedcore.models import micro_vit
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return micro_vit(num_classes=4, depth=2, embed_dim=16, num_heads=2)

FX = ContractFixture(model_factory=small_vit, data_factory=lambda: tiny_data(n=48, n_test=24))
FV = dict(fedround=2, lr_server=1e-2, batch_size=16, local_epochs=1)
RUNS = {
    "sl": lambda: run_tiny_pipeline([VanillaSL(batch_size=16)], rounds=4, fixture=FX),
    "splitfed-v1": lambda: run_tiny_pipeline([SplitFedV1(batch_size=16)], rounds=2, fixture=FX),
    "splitfed-v2": lambda: run_tiny_pipeline([SplitFedV2(batch_size=16, server_momentum=0.9)], rounds=2, fixture=FX),
    "fedv": lambda: run_tiny_pipeline([FedV(**FV)], rounds=3, fixture=FX),
    "fedv-participants": lambda: run_tiny_pipeline(
        [FedV(**FV, aggregate_scope="participants", server_optimizer="adam")], rounds=3, fixture=FX),
    "fedvz": lambda: run_tiny_pipeline([FedVZ(**FV)], rounds=3, fixture=FX),
}

def digest(t):
    return hashlib.sha256(t.detach().contiguous().cpu().numpy().tobytes()).hexdigest()

def run_pinned(make):
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        r = make()
    finally:
        torch.set_num_threads(n)
    rows = [{k: v for k, v in row.items() if k not in WALL} for row in r.history]
    return json.loads(json.dumps({"history": rows, "ledger": r.ledger.to_rows(),
                                  "weights": {k: digest(v) for k, v in r.model.state_dict().items()}}))

out = {name: run_pinned(make) for name, make in RUNS.items()}
open(sys.argv[1], "w").write(json.dumps(out, indent=1))
print({k: [list(r) for r in v["history"]][:1] for k, v in out.items()})
