"""Local-update slot: the edge step (FedVKD Eq. 17 / FedGKT) then the extraction pass that forms the uplink.

``E_c`` epochs of ``CE + beta * T^2 * KL(p_T(z_server) || p_T(z_edge))`` over the client's samples, the
server logits looked up by sample id (CE only where none exist yet: round 0). Then, with the edge model in
eval mode (BN running statistics, spec A22), one pass over the samples gives the uplink: sample ids,
features, edge logits, labels. The edge weights and the edge optimizer stay in ``ClientState``.
"""
from __future__ import annotations

from typing import Any, ClassVar

import attrs
import torch
import torch.nn.functional as F

import fedcore
from fedcore import ConfigError, RoundContext
from fedcore.data import gather
from fedcore.runtime import book_samples
from fedcore.settings import setting
from fedcore.stash import StashKey
from fedcore.types import ClientData, ClientInfo, ClientState, ClientUpdate, JobPlan, Message, Share, Upload
from fedcore_distill.losses import EDGE_KD_FORMS, edge_kd_loss
from fedcore_distill.messages import FEATURES, LABELS, LOGITS, SAMPLE_IDS, FeaturePacket, teacher_lookup
from fedcore_distill.share import EDGE_PREFIX, EdgeClient, teacher_of

EDGE_OPTIMIZER = StashKey[dict]("distill.edge-optimizer")


def fetch(dataset: Any, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and labels of samples ``ids`` (model inputs: an image dataset's transform applied)."""
    return gather(dataset, ids)


def augment(x: torch.Tensor, generator: torch.Generator, pad: int = 2) -> torch.Tensor:
    """Random crop with ``pad`` px zero padding and horizontal flip (tensor ops, per sample)."""
    n, _, h, w = x.shape
    padded = F.pad(x, (pad, pad, pad, pad))
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=generator)
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=generator)
    flip = torch.rand(n, generator=generator) < 0.5
    out = torch.stack([padded[i, :, int(dy[i]):int(dy[i]) + h, int(dx[i]):int(dx[i]) + w] for i in range(n)])
    out[flip] = out[flip].flip(-1)
    return out


@attrs.frozen(eq=False, kw_only=True)
class EdgeKDTrain:
    """Local-update slot: CE + soft KD toward the server's logits, then the feature/logit/label uplink."""

    loss_scaling: ClassVar[bool] = False
    """The CE + KD loop has no loss scaling: precision = "fp16" is refused."""
    uploads: ClassVar[Upload] = Upload.FEATURES
    """The feature/logit/label uplink of every sample it trained on."""

    epochs: int = setting(1, low=1, help="E_c: local epochs per round")
    batch_size: int = setting(64, low=1)
    lr: float = setting(1e-3, low=0.0, low_open=True, help="Adam learning rate (FedML)")
    weight_decay: float = setting(1e-4, low=0.0)
    temperature: float = setting(3.0, low=0.0, low_open=True, help="T of the soft targets (FedML)")
    beta: float = setting(1.0, low=0.0, help="weight of the KD term (Eq. 14: 1); 0 = CE only (ablation); "
                                             "edge_kd_form = 'eq14' only")
    edge_kd_form: str = setting("eq14", choices=EDGE_KD_FORMS,
                                help="spec 002 A2: 'eq14' = CE + beta KD (FedVKD Eq. 14/17); 'eq6' = (1 - kd_lambda) "
                                     "CE + kd_lambda KD (the generic form of Sec. 2.2, Eq. 6)")
    kd_lambda: float = setting(0.5, low=0.0, high=1.0, help="lambda of edge_kd_form = 'eq6'")
    t2_scale: bool = setting(True, help="multiply the KD term by T^2 (FedML); False = the literal Eq. 14")
    augment: bool = setting(True, help="random crop (2 px) + flip during local training")
    feature_dtype: str = setting("float32", choices=("float32", "float16"), help="features on the wire")
    extract_augment: bool = setting(False, help="spec 002 A10: extract the uplink features from augmented images "
                                                "(FedML's train transforms; the edge stays in eval mode); False = "
                                                "clean images")
    freeze_extractor: bool = setting(False, help="control (issue 28): the extractor keeps its initial weights and "
                                                 "batch-norm statistics, only the classifier trains; with "
                                                 "edge-share's same_init every client uploads the features of one "
                                                 "fixed extractor")

    @classmethod
    def __fedcore_checks__(cls):  # type: ignore[no-untyped-def]
        from fedcore_distill.checks import distill_check_plan

        return distill_check_plan(cls)

    @fedcore.hookimpl
    def fedcore_local_update(self, client: ClientInfo, share: Share, data: ClientData, state: ClientState,
                             ctx: RoundContext) -> ClientUpdate:
        module = share.module
        assert isinstance(module, EdgeClient), "edge-kd-train runs with the edge-share split"
        edge = module.edge
        ids = torch.as_tensor(list(data.indices), dtype=torch.long)
        teacher = torch.zeros(0)
        has = torch.zeros(len(ids), dtype=torch.bool)
        teacher_ids, teacher_logits = teacher_of(share)
        if teacher_ids.numel():
            by_id = teacher_lookup(client.id, teacher_ids, teacher_logits, ids)
            has = torch.tensor([int(i) in by_id for i in ids])
            teacher = torch.stack([by_id.get(int(i), teacher_logits[0]) for i in ids])
        params = edge.classifier.parameters() if self.freeze_extractor else edge.parameters()
        opt = torch.optim.Adam(params, lr=self.lr, weight_decay=self.weight_decay, amsgrad=True)
        if EDGE_OPTIMIZER in state.stash:
            opt.load_state_dict(state.stash[EDGE_OPTIMIZER])
        shuffle, crops = ctx.rng("shuffle"), ctx.rng("augment")
        edge.train()
        if self.freeze_extractor:
            edge.extractor.eval().requires_grad_(False)
        total, kd_total, seen = 0.0, 0.0, 0
        for _ in range(self.epochs):
            order = torch.randperm(len(ids), generator=shuffle)
            for pos in order.split(self.batch_size):
                if len(pos) == 1 < len(ids):  # batch norm cannot train on one sample (a 1x1 map on small images)
                    continue
                x, y = fetch(data.dataset, ids[pos])
                if self.augment:
                    x = augment(x, crops)
                z = edge(x)
                loss, kd = self.edge_loss(z, y, teacher[pos] if teacher.numel() else teacher, has[pos])
                if kd is not None:
                    kd_total += float(kd.detach()) * len(pos)
                opt.zero_grad()
                loss.backward()
                opt.step()
                book_samples(module, len(pos))  # the loop runs ``edge``, not the share's module: book the batch
                total += float(loss.detach()) * len(pos)
                seen += len(pos)
        state.stash[EDGE_OPTIMIZER] = opt.state_dict()
        state.tensors = {EDGE_PREFIX + k: v.detach().clone() for k, v in edge.state_dict().items()}
        packet = self.extract(client.id, edge, data.dataset, ids, crops if self.extract_augment else None)
        for chunk in ids.split(self.extract_chunk):  # the extraction pass: one forward of every sample
            book_samples(module, len(chunk), train=False)
        return ClientUpdate(client_id=client.id, tensors=packet.entries(), num_examples=len(ids),
                            metrics={"loss": total / max(seen, 1), "kd_loss": kd_total / max(seen, 1)})

    def __attrs_post_init__(self) -> None:
        if self.edge_kd_form == "eq6" and self.beta != 1.0:
            raise ConfigError(f"EdgeKDTrain.beta={self.beta!r} has no effect with edge_kd_form='eq6'; weight the KD "
                              "term with kd_lambda (or use edge_kd_form='eq14')")

    def edge_loss(self, z: torch.Tensor, y: torch.Tensor, teacher: torch.Tensor, has_teacher: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """This step's loss on one batch (:func:`fedcore_distill.losses.edge_kd_loss` with its settings)."""
        return edge_kd_loss(z, y, teacher, has_teacher, form=self.edge_kd_form, beta=self.beta,
                            kd_lambda=self.kd_lambda, temperature=self.temperature, t2_scale=self.t2_scale)

    @fedcore.hookimpl
    def fedcore_plan_job(self, client: ClientInfo, share: Share, samples: int, example: torch.Tensor,
                         ctx: RoundContext) -> JobPlan | None:
        """A dry run: the uplink of every sample (id, features, edge logits, label) and the training steps.

        Shapes come from the edge model on the meta ``example``. The real loop books every training batch and the
        extraction pass on the job's meter (:func:`fedcore.runtime.book_samples`), so the clock prices
        ``epochs x samples`` of training (less skipped one-sample batches) and one forward of every sample."""
        module = share.module
        if not isinstance(module, EdgeClient):
            return None
        with torch.no_grad():
            z, h = module.edge.forward_with_features(example)
        feature = h[0].numel() * torch.empty(0, dtype=getattr(torch, self.feature_dtype)).element_size()
        per = {SAMPLE_IDS: 8, FEATURES: feature, LOGITS: z[0].numel() * z.element_size(), LABELS: 8}
        messages = [Message(direction="up", kind=share.kinds.get(name, "weights"), nbytes=samples * n)
                    for name, n in per.items()]
        sizes = [min(self.batch_size, samples - i) for i in range(0, samples, self.batch_size)]
        trained = [b for b in sizes if not b == 1 < samples]
        return JobPlan(messages=messages, train_samples=self.epochs * sum(trained), eval_samples=samples,
                       num_examples=samples, steps=self.epochs * len(trained),
                       batch_size=min(self.batch_size, max(samples, 1)))

    @property
    def extract_chunk(self) -> int:
        return max(self.batch_size, 256)

    def extract(self, client_id: int, edge: Any, dataset: Any, ids: torch.Tensor,
                crops: torch.Generator | None = None) -> FeaturePacket:
        """The uplink: features, logits and labels of every sample, edge model in eval mode (images augmented
        with ``crops`` when given: ``extract_augment``)."""
        edge.eval()
        feats, logits, labels = [], [], []
        with torch.no_grad():
            for chunk in ids.split(self.extract_chunk):
                x, y = fetch(dataset, chunk)
                if crops is not None:
                    x = augment(x, crops)
                z, h = edge.forward_with_features(x)
                feats.append(h.to(getattr(torch, self.feature_dtype)))
                logits.append(z)
                labels.append(y.long())
        return FeaturePacket(client_id=client_id, sample_ids=ids.clone(), features=torch.cat(feats),
                             logits=torch.cat(logits), labels=torch.cat(labels))


__all__ = ["EDGE_OPTIMIZER", "EdgeKDTrain", "augment", "fetch"]
