"""CaFPT ("Explore and Cure", thesis ch. 6): per-client few-shot selection by pointwise V-information.

:class:`CaFPT` fills the data-selection slot and composes with any prompt method (PromptFL, pFedPrompt).
"""
from fedcore_cafpt.pvi import fresh_prompt, null_feature, pvi_scores
from fedcore_cafpt.select import SCORES, SELECTION, CaFPT, top_per_class

__all__ = ["CaFPT", "SCORES", "SELECTION", "fresh_prompt", "null_feature", "pvi_scores", "top_per_class"]
