"""Byzantine-robust aggregators for fedcore (Yin et al., ICML 2018): coordinate-wise trimmed mean and median."""
from fedcore_robust.aggregators import CoordinateMedian, TrimmedMean, coordinate_median, trimmed_mean

__all__ = ["CoordinateMedian", "TrimmedMean", "coordinate_median", "trimmed_mean"]
