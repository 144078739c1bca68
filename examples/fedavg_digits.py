"""FedAvg on the embedded digits set: 10 clients, Dirichlet(0.5) label skew, the micro CNN, 10 rounds."""
import torch

import fedcore
from fedcore.builtin import DirichletPartition, FedAvg, SGDUpdate, UniformSync
from fedcore.data import load_digits
from fedcore.models import micro_cnn

train, test = load_digits(seed=0)
torch.manual_seed(0)
pipe = fedcore.Pipeline([
    DirichletPartition(alpha=0.5, min_size=20),
    UniformSync(fraction=1.0),
    SGDUpdate(lr=0.05, momentum=0.9, epochs=1, batch_size=32),
    FedAvg(),
])
result = pipe.run(model=micro_cnn(num_classes=10), train=train, test=test, num_clients=10, rounds=10, seed=0)
for row in result.history:
    print(f"round {row['round']:2d}  train_loss {row['train_loss']:.3f}  test_accuracy {row['test_accuracy']:.3f}  "
          f"MB up {row['bytes_up'] / 1e6:.2f}  down {row['bytes_down'] / 1e6:.2f}")
print(result.summary())
