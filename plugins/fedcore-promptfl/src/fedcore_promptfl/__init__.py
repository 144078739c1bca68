"""PromptFL (Guo et al., ACM MM 2023; thesis ch. 4): clients train only a CoOp prompt on a frozen CLIP.

The prompt substrate lives in :mod:`fedcore_clip`; this package names the method, builds its pipeline,
provides the FedAvg fine-tune / from-scratch baselines of Tables 4.2-4.3 (with their accuracy + macro-F1
evaluation) and the Table 4.1 cost model.
"""
from fedcore_promptfl.baselines import ImageTowerClassifier, clip_image_classifier, finetune_pipeline
from fedcore_promptfl.cost import SystemCost, clip_counts, prompt_ratios, system_cost
from fedcore_promptfl.evaluate import ClassifierEval
from fedcore_promptfl.method import PromptFL, promptfl_pipeline

__all__ = [
    "ClassifierEval", "ImageTowerClassifier", "PromptFL", "SystemCost", "clip_counts", "clip_image_classifier",
    "finetune_pipeline", "prompt_ratios", "promptfl_pipeline", "system_cost",
]
