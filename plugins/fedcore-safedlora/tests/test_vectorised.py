"""SA-FedLoRA under the ``vectorised`` cohort: both stages (proximal whole model with gradient clipping, then LoRA
factors on a frozen backbone shared by all clients) give every client the update it gets one by one."""
import logging

import torch

import fedcore
from fedcore.data import synthetic_classification
from fedcore.models import micro_vit

torch.set_num_threads(1)


class Uploads:
    def __init__(self):
        self.seen = {}

    @fedcore.hookimpl
    def fedcore_client_done(self, client, update, ctx):
        self.seen[(ctx.round, client.id)] = {k: v.clone() for k, v in update.tensors.items()}


def run(cohort):
    torch.manual_seed(0)
    model = micro_vit(num_classes=4, embed_dim=16, depth=1, num_heads=2)
    full = synthetic_classification(n=120, num_classes=4, seed=0)
    uploads = Uploads()
    pipe = fedcore.Pipeline.from_config({
        "recipe": "sa-fedlora", "cohort": cohort,
        "local_update": {"e1_local_epochs": 1, "e2_local_epochs": 1, "batch_size": 8, "clip_norm": 0.5},
        "plugins": [{"name": "sa-fedlora-plan", "t1_rounds": 1, "t2_rounds": 2, "r_a": 3, "r_b": 2, "t_a": 0,
                     "t_b": 1}]})
    pipe = fedcore.Pipeline([*pipe.components, uploads])
    pipe.run(model=model, train=full.subset(range(90)), test=full.subset(range(90, 120)), num_clients=4, rounds=2,
             seed=0)
    return uploads.seen


def test_both_stages_match_one_by_one(caplog):
    alone = run("per-job")
    with caplog.at_level(logging.INFO, logger="fedcore.cohort"):
        together = run({"name": "vectorised", "on_cpu": "vectorise"})
    assert not [r.getMessage() for r in caplog.records if r.name == "fedcore.cohort"]  # vectorised, no fallback
    assert alone.keys() == together.keys() and {r for r, _ in alone} == {0, 1}
    stage_entries = {r: set(t) for (r, _), t in alone.items()}
    assert stage_entries[0] != stage_entries[1]  # the whole model in stage 1, LoRA factors (and the head) in stage 2
    for key, tensors in alone.items():
        for name, value in tensors.items():
            torch.testing.assert_close(together[key][name], value, rtol=0, atol=1e-5, msg=f"{key} {name}")
