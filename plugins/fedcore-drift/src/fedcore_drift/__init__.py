"""Client-drift correction for fedcore: SCAFFOLD (options I and II), FedNova, FedDyn."""
from fedcore_drift.feddyn import GRAD, FedDynAggregate, FedDynUpdate, H
from fedcore_drift.fednova import A, FedNovaAggregate, FedNovaUpdate, effective_steps
from fedcore_drift.recipes import RECIPES
from fedcore_drift.scaffold import DC, C, ScaffoldAggregate, ScaffoldUpdate

__all__ = ["RECIPES", "A", "C", "DC", "GRAD", "H", "FedDynAggregate", "FedDynUpdate", "FedNovaAggregate",
           "FedNovaUpdate", "ScaffoldAggregate", "ScaffoldUpdate", "effective_steps"]
