"""A ViT with timm's parameter names whose blocks can hold a subset of heads and MLP hidden units.

timm's ``Attention`` ties the head count to ``dim // num_heads`` and cannot hold 3 of 8 heads, so the
blocks here are our own, but every parameter keeps its timm name (``blocks.{i}.attn.qkv`` ...), so a
timm ``VisionTransformer`` state dict loads into the full model unchanged. Outputs of a pruned
``attn.proj`` / ``mlp.fc2`` are zero-padded back to ``embed_dim`` (Co-S2P Sec. 4.1).

Every block also takes optional *masks* (``BlockMasks``): float or binary values per kept head, hidden
unit and output row that multiply the weights (w ⊙ M̂, Co-S2P Eq. 2). A binary mask gives the same
output as the physically sliced block; a straight-through mask lets gradients reach mask logits.
"""
from __future__ import annotations

from contextlib import nullcontext

import attrs
import torch
from torch import nn
import torch.nn.functional as F

from fedcore.errors import ConfigError
from fedcore_pruning.shape import ViTShape
from fedcore_pruning.spec import BlockKeep, SubmodelSpec


@attrs.frozen(eq=False, kw_only=True)
class BlockMasks:
    """Multipliers for one block, in the block's own (kept) coordinates; ``None`` leaves that part unmasked."""

    heads: torch.Tensor | None = None
    hidden: torch.Tensor | None = None
    attn_out: torch.Tensor | None = None
    mlp_out: torch.Tensor | None = None

    def parts(self) -> dict[str, torch.Tensor]:
        names = ("heads", "hidden", "attn_out", "mlp_out")
        return {name: t for name in names if (t := getattr(self, name)) is not None}

    @property
    def requires_grad(self) -> bool:
        return any(t.requires_grad for t in self.parts().values())

    def to(self, device: torch.device) -> BlockMasks:
        """The masks on ``device`` (differentiably: gradients reach logits kept on the CPU, as Co-S2P keeps them)."""
        if all(t.device == device for t in self.parts().values()):
            return self
        return BlockMasks(**{name: t.to(device) for name, t in self.parts().items()})


def _padding_index(kept: tuple[int, ...], size: int) -> torch.Tensor | None:
    return None if len(kept) == size else torch.tensor(kept, dtype=torch.long)


def _zero_pad(y: torch.Tensor, index: torch.Tensor | None, size: int) -> torch.Tensor:
    if index is None:
        return y
    return y.new_zeros(*y.shape[:-1], size).index_copy(-1, index, y)


class PrunableAttention(nn.Module):
    """Multi-head self-attention over ``len(heads)`` heads of width ``head_dim`` (scale stays head_dim**-0.5)."""

    out_index: torch.Tensor | None

    def __init__(self, dim: int, num_heads: int, head_dim: int, out_rows: tuple[int, ...]) -> None:
        super().__init__()
        self.num_heads, self.head_dim, self.dim = num_heads, head_dim, dim
        self.qkv = nn.Linear(dim, 3 * num_heads * head_dim)
        self.proj = nn.Linear(num_heads * head_dim, len(out_rows))
        self.register_buffer("out_index", _padding_index(out_rows, dim), persistent=False)

    def forward(self, x: torch.Tensor, heads: torch.Tensor | None = None,
                out: torch.Tensor | None = None) -> torch.Tensor:
        B, N, _ = x.shape
        h, hd = self.num_heads, self.head_dim
        qkv_w: torch.Tensor = self.qkv.weight
        qkv_b: torch.Tensor = self.qkv.bias
        proj_w: torch.Tensor = self.proj.weight
        proj_b: torch.Tensor = self.proj.bias
        if heads is not None:
            cols = heads.repeat_interleave(hd)
            rows = cols.repeat(3)
            qkv_w, qkv_b, proj_w = qkv_w * rows[:, None], qkv_b * rows, proj_w * cols[None, :]
        if out is not None:
            proj_w, proj_b = proj_w * out[:, None], proj_b * out
        q, k, v = F.linear(x, qkv_w, qkv_b).reshape(B, N, 3, h, hd).permute(2, 0, 3, 1, 4).unbind(0)
        # explicit matmuls instead of scaled_dot_product_attention: torch's FLOP counter sees them on CPU
        attn = ((q * hd ** -0.5) @ k.transpose(-2, -1)).softmax(dim=-1)
        y = (attn @ v).transpose(1, 2).reshape(B, N, h * hd)
        return _zero_pad(F.linear(y, proj_w, proj_b), self.out_index, self.dim)


class PrunableMlp(nn.Module):
    """fc1 -> GELU -> fc2 over ``hidden`` units, output rows zero-padded back to ``dim``."""

    out_index: torch.Tensor | None

    def __init__(self, dim: int, hidden: int, out_rows: tuple[int, ...]) -> None:
        super().__init__()
        self.dim = dim
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, len(out_rows))
        self.register_buffer("out_index", _padding_index(out_rows, dim), persistent=False)

    def forward(self, x: torch.Tensor, hidden: torch.Tensor | None = None,
                out: torch.Tensor | None = None) -> torch.Tensor:
        fc1_w: torch.Tensor = self.fc1.weight
        fc1_b: torch.Tensor = self.fc1.bias
        fc2_w: torch.Tensor = self.fc2.weight
        fc2_b: torch.Tensor = self.fc2.bias
        if hidden is not None:
            fc1_w, fc1_b, fc2_w = fc1_w * hidden[:, None], fc1_b * hidden, fc2_w * hidden[None, :]
        if out is not None:
            fc2_w, fc2_b = fc2_w * out[:, None], fc2_b * out
        y = F.linear(self.act(F.linear(x, fc1_w, fc1_b)), fc2_w, fc2_b)
        return _zero_pad(y, self.out_index, self.dim)


class PrunableBlock(nn.Module):
    """Pre-norm transformer block (timm ``Block`` without layer scale or drop path)."""

    def __init__(self, shape: ViTShape, keep: BlockKeep) -> None:
        super().__init__()
        d = shape.embed_dim
        self.norm1 = nn.LayerNorm(d, eps=shape.eps)
        self.attn = PrunableAttention(d, len(keep.heads), shape.head_dim, keep.attn_out)
        self.norm2 = nn.LayerNorm(d, eps=shape.eps)
        self.mlp = PrunableMlp(d, len(keep.hidden), keep.mlp_out)

    def check_masks(self, masks: BlockMasks, block: int) -> None:
        sizes = {"heads": self.attn.num_heads, "hidden": self.mlp.fc1.out_features,
                 "attn_out": self.attn.proj.out_features, "mlp_out": self.mlp.fc2.out_features}
        for name, t in masks.parts().items():
            if t.shape != (sizes[name],):
                raise ConfigError(f"block {block} mask {name} has shape {tuple(t.shape)}; this block holds "
                                  f"{sizes[name]} {name}, so the mask must have shape ({sizes[name]},)")

    def forward(self, x: torch.Tensor, masks: BlockMasks | None = None) -> torch.Tensor:
        m = (masks or BlockMasks()).to(x.device)  # masks live where their logits do; the weights maybe on a GPU
        x = x + self.attn(self.norm1(x), m.heads, m.attn_out)
        return x + self.mlp(self.norm2(x), m.hidden, m.mlp_out)


class Exit(nn.Module):
    """An early-exit classifier on the class token: LayerNorm + Linear, the form of the global norm + head."""

    def __init__(self, dim: int, num_outputs: int, eps: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=eps)
        self.head = nn.Linear(dim, num_outputs)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(tokens[:, 0]))


class PatchEmbed(nn.Module):
    """Non-overlapping patches by a strided convolution (timm's ``patch_embed.proj``)."""

    def __init__(self, shape: ViTShape) -> None:
        super().__init__()
        self.proj = nn.Conv2d(shape.in_chans, shape.embed_dim, kernel_size=shape.patch_size, stride=shape.patch_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)


class PrunableViT(nn.Module):
    """The submodel of ``spec`` (the full model when ``spec`` is None), with timm's parameter names.

    The frozen prefix runs under ``torch.no_grad`` and its parameters do not require gradients;
    ``forward_all`` returns one logit tensor per exit (by depth) and the head's last; ``forward`` the last.
    Logits cover ``spec.classes`` in that order.
    """

    norm: nn.LayerNorm  # final norm and head: present only when ``spec.head``
    head: nn.Linear

    def __init__(self, shape: ViTShape, spec: SubmodelSpec | None = None) -> None:
        super().__init__()
        spec = SubmodelSpec.full(shape) if spec is None else spec
        if spec.shape is not shape and attrs.asdict(spec.shape) != attrs.asdict(shape):
            raise ConfigError(f"spec was built for {spec.shape}, not {shape}")
        self.shape, self.spec = shape, spec
        d = shape.embed_dim
        self.patch_embed = PatchEmbed(shape)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d))
        self.pos_embed = nn.Parameter(torch.randn(1, shape.num_tokens, d) * 0.02)
        self.blocks = nn.ModuleList(PrunableBlock(shape, keep) for keep in spec.blocks)
        self.exits = nn.ModuleDict({str(depth): Exit(d, len(spec.classes), shape.eps) for depth in spec.exits})
        if spec.head:
            self.norm = nn.LayerNorm(d, eps=shape.eps)
            self.head = nn.Linear(d, len(spec.classes))
        self._init_weights()
        self._freeze_prefix()

    def _init_weights(self) -> None:
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.normal_(self.cls_token, std=1e-6)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02)
                nn.init.zeros_(module.bias)

    def _freeze_prefix(self) -> None:
        frozen = self.frozen_parameter_names()
        for name, param in self.named_parameters():
            param.requires_grad_(name not in frozen)

    def frozen_parameter_names(self) -> set[str]:
        """Embeddings (unless the window starts at block 0) and the blocks below the window."""
        spec = self.spec
        names = set()
        for name, _ in self.named_parameters():
            if name.startswith("blocks."):
                if not spec.is_trainable_block(int(name.split(".")[1])):
                    names.add(name)
            elif name.split(".")[0] in ("patch_embed", "cls_token", "pos_embed") and not spec.embeddings_trainable:
                names.add(name)
        return names

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        return x + self.pos_embed

    def forward_all(self, x: torch.Tensor, masks: list[BlockMasks | None] | None = None) -> list[torch.Tensor]:
        """Logits of every exit in depth order, then of the head; ``masks`` has one entry per held block.

        The frozen prefix runs under ``no_grad`` unless its masks require gradients (Co-S2P's mask phase
        learns masks for the prefix too, with every weight frozen).
        """
        if masks is not None and len(masks) != len(self.blocks):
            raise ConfigError(f"masks has {len(masks)} entries; this model holds {len(self.blocks)} blocks")
        per_block = [None] * len(self.blocks) if masks is None else list(masks)
        for b, (block, m) in enumerate(zip(self.blocks, per_block)):
            if m is not None:
                assert isinstance(block, PrunableBlock)
                block.check_masks(m, b)
        start = self.spec.window_start
        outputs = []
        with torch.no_grad() if start > 0 else nullcontext():
            x = self.embed(x)
        for b, block in enumerate(self.blocks):
            m = per_block[b]
            frozen = b < start and not (m is not None and m.requires_grad)
            with torch.no_grad() if frozen else nullcontext():
                x = block(x, m)
            if str(b + 1) in self.exits:
                outputs.append(self.exits[str(b + 1)](x))
        if self.spec.head:
            outputs.append(self.head(self.norm(x)[:, 0]))
        return outputs

    def forward(self, x: torch.Tensor, masks: list[BlockMasks | None] | None = None) -> torch.Tensor:
        return self.forward_all(x, masks)[-1]

    @classmethod
    def from_timm(cls, model: nn.Module) -> PrunableViT:
        """The full prunable model holding a timm ``VisionTransformer``'s weights."""
        full = cls(ViTShape.from_timm(model))
        full.load_state_dict(model.state_dict(), strict=True)
        return full
