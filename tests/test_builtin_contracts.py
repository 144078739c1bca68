"""Every built-in component passes the contract checks it asks third parties to pass.

Each built-in with its default settings is checked by ``tests/test_registered_contracts.py`` (every registered
component, as its plan declares, on the same fixture); this file adds the other settings, so no instance is checked
twice in one run.
"""
from fedcore import builtin
from fedcore.testing import parametrize_with_checks

COMPONENTS = [
    builtin.DirichletPartition(alpha=0.5, min_size=5),
    builtin.FewShotPartition(shots=2),
    builtin.FewShotPartition(shots=2, mode="random_classes", classes_per_client=2, pool_multiplier=2),
    builtin.QuantitySkewPartition(beta=1.0, min_size=5),
    builtin.LinearPartition(shuffle=False),
    builtin.PathologicalPartition(class_assignment_mode="deterministic", shuffle=False),
    builtin.InnerDirichletPartition(alpha=[1.0, 2.0, 3.0, 4.0], partition_sizes=[40, 30, 26]),
    builtin.FedAvg(weighting="uniform"),
    builtin.SGDUpdate(optimizer="adam", lr=0.01, mu=0.1, epochs=2),
    builtin.UniformSync(fraction=0.5),
    builtin.UniformSync(deadline=5.0),
    builtin.AsyncSchedule(concurrency=2, max_staleness=3),
    builtin.SemiAsyncSchedule(mu=0.5, t_clk=1.0),
    builtin.FedAsyncMix(alpha=1.0, staleness="constant"),
    builtin.FedBuffStep(server_lr=1.0, staleness="hinge", weighting="samples"),
]


@parametrize_with_checks(COMPONENTS)
def test_builtin_contract(component, check):
    check(component)
