"""Differential privacy for fedcore: DP-FedAvg (fixed/adaptive clipping, central/distributed noise), DP-SGD through
Opacus, privacy accounting with dp-accounting or Opacus, and a gradient-inversion check."""
from fedcore_dp.accounting import ACCOUNTANTS, Event, epsilon
from fedcore_dp.clipping import adaptive_noise_multiplier, clip, l2_norm, next_clip
from fedcore_dp.dp_fedavg import DPFedAvg
from fedcore_dp.dp_sgd import DPSGDUpdate

__all__ = ["ACCOUNTANTS", "DPFedAvg", "DPSGDUpdate", "Event", "adaptive_noise_multiplier", "clip", "epsilon",
           "l2_norm", "next_clip"]
