"""The provider a pipeline gets for each slot it leaves empty."""
from fedcore.builtin.all_data import AllData
from fedcore.builtin.fedavg import FedAvg
from fedcore.builtin.global_eval import GlobalEval
from fedcore.builtin.local_sgd import SGDUpdate
from fedcore.builtin.partitioners import IIDPartition
from fedcore.builtin.per_job_cohort import PerJobCohort
from fedcore.builtin.sync_rounds import UniformSync
from fedcore.builtin.whole_model import WholeModel

DEFAULTS = {
    "partition": IIDPartition,
    "schedule": UniformSync,
    "split": WholeModel,
    "select": AllData,
    "local_update": SGDUpdate,
    "cohort": PerJobCohort,
    "aggregate": FedAvg,
    "evaluate": GlobalEval,
}
