"""CaFPT: contract checks, PVI properties, top-N selection, caching, artefacts, composability with PromptFL and
pFedPrompt."""
from __future__ import annotations

import json
import math

import attrs
import numpy as np
import pytest
import torch

import fedcore
from fedcore.builtin import FedAvg, FewShotPartition, UniformSync
from fedcore.errors import ConfigError
from fedcore.testing import parametrize_with_checks
from fedcore_cafpt import SELECTION, CaFPT, pvi_scores, top_per_class
from fedcore_clip import PromptEval, PromptShare, PromptUpdate, encode_all, prompted_clip
from fedcore_clip.testing import PROMPT_FIXTURE, one_thread, shapes_data
from fedcore_clip.testing import tiny_backbone as backbone


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():
        yield


def data(classes=6, n_train=10, n_test=3):
    return shapes_data(n_train, n_test, classes, stream="cf")


@parametrize_with_checks([CaFPT(shots=2, pvi_epochs=1, lr=0.05), CaFPT(shots=1, select="random"),
                          CaFPT(shots=2, null_mode="label_marginal", granularity="per_client", pvi_epochs=1)],
                         fixture=PROMPT_FIXTURE)
def test_contract(component, check):
    check(component)


def pipeline(select=None, shots=2, pool_multiplier=1, evaluate=None):
    comps = [FewShotPartition(shots=shots, mode="disjoint", pool_multiplier=pool_multiplier), UniformSync(),
             PromptShare(), PromptUpdate(lr=0.05, epochs=2), FedAvg(weighting="uniform"), evaluate or PromptEval()]
    return fedcore.Pipeline(comps + ([select] if select is not None else []))


def run(pipe, out_dir=None):
    train, test = data()
    model = prompted_clip(backbone(), train.classes, n_ctx=4)
    return pipe.run(model=model, train=train, test=test, num_clients=3, rounds=2, seed=0, out_dir=out_dir)


@attrs.frozen(eq=False, kw_only=True)
class GivenSelection:
    """Each client's data narrowed to a fixed subset of its pool, with no scoring: PromptFL on that data."""

    selections: dict

    @fedcore.hookimpl
    def fedcore_select_data(self, client, indices, dataset, share, state, ctx):
        return self.selections[client.id]


def _selection_is_promptfl_on_the_selected_data(cafpt):
    """On a pool of 3N per class, CaFPT keeps N per class, and the run equals PromptFL trained on exactly that data
    bit for bit: CaFPT and PromptFL differ only in the data (scoring draws no random number training uses)."""
    res = run(pipeline(cafpt, pool_multiplier=3))
    selections = {cid: state.stash[SELECTION] for cid, state in res.run.client_states.items()}
    train, _ = data()
    for cid, sel in selections.items():
        pool = res.run.partition.pool[cid]
        assert set(sel) < set(pool) and len(sel) == len(pool) // 3, "selection kept N of the 3N per class"
        assert all(n == 2 for n in np.bincount(train.y[list(sel)].numpy()) if n)
    reference = run(pipeline(GivenSelection(selections=selections), pool_multiplier=3))
    assert res.history.comparable() == reference.history.comparable()
    whole_pool = run(pipeline(pool_multiplier=3))
    assert res.history.comparable() != whole_pool.history.comparable(), "the selection changed nothing"
    return selections


def test_random_selection_equals_promptfl_on_the_selected_data_bit_for_bit():
    _selection_is_promptfl_on_the_selected_data(CaFPT(shots=2, select="random"))


def test_pvi_selection_equals_promptfl_on_the_selected_data_bit_for_bit():
    pvi = _selection_is_promptfl_on_the_selected_data(CaFPT(shots=2, pvi_epochs=1, lr=0.05))
    rng = run(pipeline(CaFPT(shots=2, select="random"), pool_multiplier=3))
    assert pvi != {cid: s.stash[SELECTION] for cid, s in rng.run.client_states.items()}, "PVI picked at random"


def test_selection_is_top_n_per_class_cached_and_saved(tmp_path):
    res = run(pipeline(CaFPT(shots=2, pvi_epochs=2, lr=0.05), pool_multiplier=3), out_dir=tmp_path)
    train, _ = data()
    for cid, state in res.run.client_states.items():
        sel = state.stash[SELECTION]
        labels = train.y[list(sel)].numpy()
        assert all(n == 2 for n in np.bincount(labels) if n), "exactly N per class"
        assert set(sel) <= set(res.run.partition.pool[cid])
        saved = json.loads((tmp_path / "cafpt" / f"scores_client{cid}.json").read_text())
        pvi = np.asarray(saved["pvi"])
        assert sorted(saved["index"][i] for i in saved["selected"]) == list(sel)
        for c in np.unique(labels):
            pos = [i for i, y in enumerate(saved["label"]) if y == c]
            chosen = [i for i in pos if i in saved["selected"]]
            assert min(pvi[chosen]) >= max(np.delete(pvi, chosen)[np.isin(np.delete(np.arange(len(pvi)), chosen), pos)],
                                           default=-np.inf)
    assert res.ledger.total(direction="up") == 2 * 3 * 4 * 64 * 4, "scores never cross the network"


def test_label_marginal_pvi_on_a_balanced_pool():
    train, _ = data(classes=3, n_train=4)
    model = prompted_clip(backbone(), train.classes, n_ctx=4)
    feats = encode_all(backbone(), train, range(len(train)))
    out = pvi_scores(model, feats, train.y, epochs=1, lr=0.05, batch_size=8, generator=torch.Generator().manual_seed(0),
                     null_mode="label_marginal")
    assert torch.allclose(out["pvi"], out["log2_p_x"] + math.log2(3), atol=1e-6)


def test_a_mislabelled_duplicate_scores_below_its_clean_twin():
    # Features clustered around each class's text feature (what a pre-trained CLIP gives); a random
    # tiny CLIP's image features carry no class information, so the clusters are made explicitly.
    names = ["red circle", "blue square", "green cross", "cyan ring"]
    model = prompted_clip(backbone(), names, n_ctx=4)
    g = torch.Generator().manual_seed(0)
    y = torch.arange(4).repeat_interleave(6)
    with torch.no_grad():
        centres = model.text_features()
    feats = torch.nn.functional.normalize(centres[y] + 0.05 * torch.randn(len(y), centres.shape[1], generator=g),
                                          dim=-1)
    feats = torch.cat([feats, feats[:1]])
    labels = torch.cat([y, torch.tensor([1])])  # the duplicate of sample 0 (class 0) labelled class 1
    for mode in ("null_image", "label_marginal"):
        out = pvi_scores(model, feats, labels, epochs=10, lr=0.05, batch_size=32,
                         generator=torch.Generator().manual_seed(0), null_mode=mode)
        assert float(out["pvi"][0]) > float(out["pvi"][-1]) + 0.5, mode


def test_top_per_class_ties_by_position():
    assert top_per_class(np.array([1.0, 1.0, 0.5, 2.0]), np.array([0, 0, 0, 1]), 1) == [0, 3]


def test_too_many_shots_for_the_pool_is_a_clear_error():
    with pytest.raises(ConfigError, match="pool has only"):
        run(pipeline(CaFPT(shots=3, select="random"), shots=2))


def test_composes_with_pfedprompt():
    from fedcore_pfedprompt import MEMORY, PFedPromptEval

    res = run(pipeline(CaFPT(shots=1, pvi_epochs=1, lr=0.05), shots=1, pool_multiplier=3,
                       evaluate=PFedPromptEval(alpha=1.0)))
    for state in res.run.client_states.values():
        (m_k, _), = state.stash[MEMORY].values()
        assert m_k.shape[0] == len(state.stash[SELECTION]) == 2  # memory built from the selected shots
