"""Byzantine-robust aggregation for fedcore: coordinate-wise trimmed mean and median (Yin et al., 2018), Krum and
Multi-Krum (Blanchard et al., 2017), Bulyan (El Mhamdi et al., 2018), centred clipping (Karimireddy et al., 2021),
and seeded Byzantine clients to measure them with."""
from fedcore_robust.aggregators import CoordinateMedian, TrimmedMean, coordinate_median, trimmed_mean
from fedcore_robust.attacks import ATTACKER, Byzantine, FlippedLabels, LabelFlipSGD, choose_attackers
from fedcore_robust.bulyan import Bulyan, bulyan_selection, closest_to_median_mean
from fedcore_robust.centred_clipping import CENTRE, CentredClipping, centred_clip
from fedcore_robust.changes import Changes, client_changes
from fedcore_robust.krum import Krum, MultiKrum, krum_scores, squared_distances
from fedcore_robust.recipes import RECIPES

__all__ = [
    "ATTACKER", "CENTRE", "RECIPES", "Bulyan", "Byzantine", "Changes", "CentredClipping", "CoordinateMedian",
    "FlippedLabels", "Krum", "LabelFlipSGD", "MultiKrum", "TrimmedMean", "bulyan_selection", "centred_clip",
    "choose_attackers", "client_changes", "closest_to_median_mean", "coordinate_median", "krum_scores",
    "squared_distances", "trimmed_mean",
]
