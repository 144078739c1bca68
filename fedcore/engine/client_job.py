"""Moved: client jobs are public contract types in :mod:`fedcore.jobs` (``ClientJob``, ``JobResult``, ``run_cohort``).

This engine-internal path keeps working as a plain re-export.
"""
from fedcore.jobs import ClientJob, JobResult, cohort_problem, run_cohort
from fedcore.runtime.job_rng import seed_torch

__all__ = ["ClientJob", "JobResult", "cohort_problem", "run_cohort", "seed_torch"]
