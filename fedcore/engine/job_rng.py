"""Moved: :mod:`fedcore.runtime.job_rng` (torch's global generator around client work). A plain re-export."""
from fedcore.runtime.job_rng import (
    DrawRecord,
    cohort_rng,
    in_worker_thread,
    job_torch_rng,
    recording_draws,
    seed_torch,
    worker_thread,
)

__all__ = ["DrawRecord", "cohort_rng", "in_worker_thread", "job_torch_rng", "recording_draws", "seed_torch",
           "worker_thread"]
