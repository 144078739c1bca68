"""pFedPrompt (Guo et al., WWW 2023; thesis ch. 5) and its adapted personalisation baselines, for fedcore.

pFedPrompt = PromptFL training of a shared prompt (user consensus) + a non-parametric local feature
attention over each client's own few-shot features at inference (:class:`PFedPromptEval`). Baselines:
:class:`PromptFLFineTune` (PromptFL+FT), :class:`PromptPer`, :class:`PromptProx`, :class:`PromptAMP`.
"""
from fedcore_pfedprompt.attention import build_memory, personal_logits
from fedcore_pfedprompt.baselines import LAST_SEEN, PromptAMP, PromptProx
from fedcore_pfedprompt.evaluators import (
    MEMORY,
    PersonalPromptEval,
    PFedPromptEval,
    PromptFLFineTune,
    PromptPer,
    client_memory,
)

__all__ = [
    "LAST_SEEN", "MEMORY", "PFedPromptEval", "PersonalPromptEval", "PromptAMP", "PromptFLFineTune", "PromptPer",
    "PromptProx", "build_memory", "client_memory", "personal_logits",
]
