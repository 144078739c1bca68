"""Test helpers for fedcore components: contract checks, check plans, tiny fixtures, a hook recorder, the device
audit, and :func:`heavy_imports` (registering a plugin imports no heavy library).

A plain library, not an auto-loaded pytest plugin: import what you need in your plugin's tests.
"""
from fedcore.testing.cohort import COHORT_CHECKS
from fedcore.testing.contracts import (
    GENERIC_CHECKS,
    SLOT_CHECKS,
    AdvisoryCheckWarning,
    ContractCheckError,
    StaleExpectedFailureWarning,
    check_hook_signatures,
    checks_for,
    parametrize_with_checks,
)
from fedcore.testing.device_audit import DefaultDeviceAudit, DeviceMixError
from fedcore.testing.executor import (
    EXECUTOR_CHECKS,
    check_executor_gives_inline_history,
    check_executor_resumes_to_inline_history,
)
from fedcore.testing.fixtures import (
    CHECK_FIXTURE,
    ContractFixture,
    HookRecorder,
    build_engine,
    round_context,
    run_tiny_pipeline,
    tiny_bn_model,
    tiny_data,
    tiny_model,
    tiny_vit,
)
from fedcore.testing.light_import import HEAVY_LIBRARIES, heavy_imports
from fedcore.testing.plans import CheckPlan, parametrize_registered, plan_for

__all__ = [
    "AdvisoryCheckWarning", "CHECK_FIXTURE", "COHORT_CHECKS", "CheckPlan", "ContractCheckError", "ContractFixture",
    "DefaultDeviceAudit", "DeviceMixError",
    "EXECUTOR_CHECKS", "GENERIC_CHECKS",
    "HEAVY_LIBRARIES", "HookRecorder", "SLOT_CHECKS", "StaleExpectedFailureWarning", "build_engine",
    "check_executor_gives_inline_history", "check_hook_signatures",
    "check_executor_resumes_to_inline_history", "checks_for", "heavy_imports", "parametrize_registered",
    "parametrize_with_checks", "plan_for", "round_context", "run_tiny_pipeline", "tiny_bn_model", "tiny_data",
    "tiny_model", "tiny_vit",
]
