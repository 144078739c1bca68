"""CoOp's prompt learner (Zhou et al., IJCV 2022) and the prompted CLIP classifier built on it.

The text input for class i is ``[SOS][v_1]...[v_p][CLASS_i][.][EOS]`` (class token at the end; ``middle``
and ``front`` move it). The context vectors ``v`` are the only trainable parameters: ``prompt.ctx``
(unified, ``[p, d]``, or class-specific, ``[K, p, d]``). With ``n_personal > 0`` the last ``n_personal``
vectors (next to the class token) are a separate parameter ``prompt.ctx_personal`` that a share keeps
on the client (PromptPer). Prefix/suffix token embeddings are non-persistent buffers: they are rebuilt
from the frozen token embedding and never cross the network.
"""
from __future__ import annotations

from collections.abc import Sequence
import copy

import torch
from torch import nn
from torch.nn import functional as F

from fedcore.errors import ConfigError
from fedcore_clip.backbone import FrozenCLIP, get_tokenizer

POSITIONS = ("end", "middle", "front")


def _bpe(tokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text))


class CoOpPromptLearner(nn.Module):
    """Learnable context vectors around the class-name tokens of every class."""

    tokenized: torch.Tensor
    token_prefix: torch.Tensor
    token_suffix: torch.Tensor

    def __init__(self, backbone: FrozenCLIP, classnames: Sequence[str], *, n_ctx: int = 16, position: str = "end",
                 csc: bool = False, init: str | None = None, init_std: float = 0.02, n_personal: int = 0,
                 seed: int = 0) -> None:
        super().__init__()
        names = [str(c).replace("_", " ") for c in classnames]
        if not names:
            raise ConfigError("CoOpPromptLearner needs at least one class name")
        if position not in POSITIONS:
            raise ConfigError(f"CoOpPromptLearner.position={position!r}; choose one of: {', '.join(POSITIONS)}")
        tok = get_tokenizer(backbone.name) if backbone.name != "custom" else get_tokenizer("RN50")
        sot, eot = tok.sot_token_id, tok.eot_token_id
        if init:
            init_ids = _bpe(tok, init)
            n_ctx = len(init_ids)
        if n_ctx < 1:
            raise ConfigError(f"CoOpPromptLearner.n_ctx={n_ctx}; the context length must be >= 1")
        if not 0 <= n_personal < n_ctx or (n_personal and csc):
            raise ConfigError(f"CoOpPromptLearner.n_personal={n_personal}; must be in [0, n_ctx={n_ctx}) and "
                              f"unified context (csc=False)")
        if init and (csc or n_personal):
            raise ConfigError("CoOpPromptLearner.init (text initialisation) works with unified, non-split context")
        L = backbone.context_length
        dot = _bpe(tok, ".")
        ctx_ids = init_ids if init else _bpe(tok, "X") * n_ctx
        rows, name_lens = [], []
        for name in names:
            name_ids = _bpe(tok, name)
            need = 1 + n_ctx + len(name_ids) + len(dot) + 1
            if need > L:
                raise ConfigError(f"class name {name!r} is {len(name_ids)} tokens; with n_ctx={n_ctx} the prompt needs "
                                  f"{need} tokens but the text encoder's context length is {L}; shorten the name "
                                  f"or lower n_ctx to <= {L - 3 - len(name_ids) - len(dot) + 1}")
            ids = [sot] + ctx_ids + name_ids + dot + [eot]
            rows.append(ids + [0] * (L - len(ids)))
            name_lens.append(len(name_ids))
        tokenized = torch.tensor(rows, dtype=torch.long)
        emb = backbone.embed_tokens(tokenized)
        d = emb.shape[-1]
        self.classnames = names
        self.n_ctx, self.position, self.csc, self.n_personal = n_ctx, position, csc, n_personal
        self.name_lens = name_lens
        self.text_length = 1 + max(r.index(eot) for r in rows)
        """Positions up to the last end-of-text token: all the causal text tower needs (a plain int, so a copy of
        the learner on the meta device still knows it)."""
        self.register_buffer("tokenized", tokenized, persistent=False)
        self.register_buffer("token_prefix", emb[:, :1].clone(), persistent=False)
        self.register_buffer("token_suffix", emb[:, 1 + n_ctx:].clone(), persistent=False)
        if init:
            ctx = emb[0, 1:1 + n_ctx].clone()
        else:
            g = torch.Generator().manual_seed(int(seed))
            shape = (len(names), n_ctx, d) if csc else (n_ctx, d)
            ctx = torch.randn(shape, generator=g) * init_std
        if n_personal:
            self.ctx = nn.Parameter(ctx[: n_ctx - n_personal].clone())
            self.ctx_personal = nn.Parameter(ctx[n_ctx - n_personal:].clone())
        else:
            self.ctx = nn.Parameter(ctx)

    @property
    def num_classes(self) -> int:
        return len(self.classnames)

    def shared_names(self) -> tuple[str, ...]:
        """Parameters every client shares (aggregated); the personal part, if any, is not among them."""
        return ("ctx",)

    def personal_names(self) -> tuple[str, ...]:
        return ("ctx_personal",) if self.n_personal else ()

    def context(self) -> torch.Tensor:
        """All context vectors, ``[K, p, d]``."""
        ctx = self.ctx if not self.n_personal else torch.cat([self.ctx, self.ctx_personal], dim=0)
        return ctx if ctx.dim() == 3 else ctx.unsqueeze(0).expand(self.num_classes, -1, -1)

    def forward(self) -> torch.Tensor:
        """Prompt embeddings ``[K, L, d]`` with the class tokens at ``position``."""
        ctx, prefix, suffix = self.context(), self.token_prefix, self.token_suffix
        if self.position == "end":
            return torch.cat([prefix, ctx, suffix], dim=1)
        out = []
        half = self.n_ctx // 2
        for i, n in enumerate(self.name_lens):
            name, rest = suffix[i:i + 1, :n], suffix[i:i + 1, n:]
            c = ctx[i:i + 1]
            if self.position == "middle":
                out.append(torch.cat([prefix[i:i + 1], c[:, :half], name, c[:, half:], rest], dim=1))
            else:
                out.append(torch.cat([prefix[i:i + 1], name, c, rest], dim=1))
        return torch.cat(out, dim=0)


class PromptedCLIP(nn.Module):
    """A frozen CLIP plus a CoOp prompt learner: ``logits = exp(t) · cos(g(x), h(P_i))`` over all classes."""

    def __init__(self, backbone: FrozenCLIP, prompt: CoOpPromptLearner) -> None:
        super().__init__()
        self.backbone = backbone
        self.prompt = prompt

    @property
    def classnames(self) -> list[str]:
        return self.prompt.classnames

    def shared_names(self) -> tuple[str, ...]:
        return tuple(f"prompt.{n}" for n in self.prompt.shared_names())

    def personal_names(self) -> tuple[str, ...]:
        return tuple(f"prompt.{n}" for n in self.prompt.personal_names())

    def working_copy(self) -> PromptedCLIP:
        """A copy whose prompt is independent and whose frozen backbone is shared (it is never modified)."""
        return PromptedCLIP(self.backbone, copy.deepcopy(self.prompt))

    def text_features(self) -> torch.Tensor:
        """L2-normalised class text features ``[K, C]``; differentiable w.r.t. the context."""
        return F.normalize(self.backbone.encode_prompts(self.prompt(), self.prompt.tokenized,
                                                        getattr(self.prompt, "text_length", None)), dim=-1)

    def logits_from_features(self, image_features: torch.Tensor, text_features: torch.Tensor | None = None
                             ) -> torch.Tensor:
        text = self.text_features() if text_features is None else text_features
        return self.backbone.logit_scale() * image_features @ text.t()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits_from_features(self.backbone.encode_image(x))


def prompted_clip(backbone: FrozenCLIP, classnames: Sequence[str], *, seed: int = 0, **prompt_kwargs) -> PromptedCLIP:
    """A :class:`PromptedCLIP` with a fresh CoOp prompt (random init N(0, 0.02²) from ``seed``)."""
    return PromptedCLIP(backbone, CoOpPromptLearner(backbone, classnames, seed=seed, **prompt_kwargs))
