"""CaFPT ("Explore and Cure", thesis ch. 6): per-client few-shot selection by pointwise V-information.

:class:`CaFPT` fills the data-selection slot and composes with any prompt method (PromptFL, pFedPrompt);
:class:`LabelNoise` is the ``[label_noise]`` config table of the noisy-label experiments.
"""
from fedcore_cafpt.label_noise import LabelNoise
from fedcore_cafpt.pvi import fresh_prompt, null_feature, pvi_scores
from fedcore_cafpt.select import SCORES, SELECTION, CaFPT, top_per_class

__all__ = ["CaFPT", "LabelNoise", "SCORES", "SELECTION", "fresh_prompt", "null_feature", "pvi_scores", "top_per_class"]
