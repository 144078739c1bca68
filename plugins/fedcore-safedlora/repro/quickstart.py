"""SA-FedLoRA on the micro ViT pre-trained by fedcore on digits 0-4, federated on digits 5-9 (about a minute).

One initiating round of proximal full-model FedAvg, then LoRA rounds whose rank anneals 6 -> 4 (cubic).
Prints, per round, the stage, the LoRA rank, the bytes that crossed the network and the test accuracy.
"""
import torch

import fedcore
from fedcore.data import load_digits
from fedcore.models import pretrained_for_target

torch.set_num_threads(1)
train, test = load_digits(classes=(5, 6, 7, 8, 9))
model, info = pretrained_for_target("micro-vit")  # cached after the first call
pipe = fedcore.recipe(  # SA-FedLoRA's components; each setting goes to the one component that owns it
    "sa-fedlora",
    partition={"name": "dirichlet", "alpha": 0.5, "min_size": 20},
    local_update={"e1_local_epochs": 5, "e2_local_epochs": 2},
    plugins=[{"name": "sa-fedlora-plan", "t1_rounds": 1, "t2_rounds": 9, "r_a": 6, "r_b": 4, "t_a": 1, "t_b": 5,
              "scheduler": "cubic"}],
)
result = pipe.run(model=model, train=train, test=test, num_clients=5, rounds=10, seed=0)
for row in result.history.rows:
    print(f"round {row['round']:2d}  stage {int(row['stage'])}  rank {int(row['lora_rank'])}  "
          f"KiB {(row['bytes_up'] + row['bytes_down']) / 1024:8.1f}  test_accuracy {row['test_accuracy']:.3f}")
