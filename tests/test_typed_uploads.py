"""Typed uploads: a share declares what its uploads carry, an aggregator what it merges; a mismatch is refused
when the pipeline is built, in one line naming both and an installed aggregator that merges them."""
from __future__ import annotations

from typing import ClassVar

import attrs
import pytest

import fedcore
from fedcore.builtin import FedAvg
from fedcore.errors import ConfigError
from fedcore.types import Upload
from fedcore.uploads import check_uploads, describe


@attrs.frozen(eq=False, kw_only=True)
class DeclaresNothing:
    """A third party's aggregator written before typed uploads existed (its FedAdam): it declares nothing."""

    @fedcore.hookimpl
    def fedcore_aggregate(self, model, updates, ctx):
        return FedAvg().fedcore_aggregate(model=model, updates=updates, ctx=ctx)


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text, text
    return text


@pytest.mark.parametrize("recipe, share, kind, fit", [
    ("co-s2p", "cos2p-share", "sliced submodels", "cos2p-aggregate"),
    ("fedvkd", "edge-share", "per-sample features/logits", "kd-server"),
    ("fedgkt", "edge-share", "per-sample features/logits", "kd-server"),
    ("fedrolex", "submodel-share", "sliced submodels", "masked-delta"),
])
@pytest.mark.parametrize("aggregate, label", [("trimmed-mean", "'trimmed-mean'"),
                                              (DeclaresNothing(), "DeclaresNothing")])
def test_weights_only_aggregators_are_refused_at_build_in_one_line(recipe, share, kind, fit, aggregate, label):
    with pytest.raises(ConfigError) as exc:
        fedcore.recipe(recipe, aggregate=aggregate)
    assert _one_line(exc) == (f"split '{share}' uploads {kind}, which aggregate {label} does not merge (it merges "
                              f"whole weights); use an aggregator that merges them: aggregate = \"{fit}\"")


def test_refused_before_round_zero_from_a_config(tmp_path, capsys):
    from fedcore.cli import main

    config = tmp_path / "fedvkd.toml"
    config.write_text('name = "x"\nrounds = 1\nnum_clients = 4\n'
                      'dataset = { name = "kd.synth-patterns", n = 40, n_test = 20, num_classes = 4 }\n'
                      'model = { name = "kd.fedvkd", num_classes = 4, image_size = 16, width = 8, embed_dim = 32, '
                      'depth = 2, num_heads = 2 }\n'
                      '[pipeline]\nrecipe = "fedvkd"\naggregate = { name = "trimmed-mean" }\n')
    assert main(["run", str(config), "--out", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "fedcore: error: pipeline: split 'edge-share' uploads per-sample features/logits, which aggregate "
        "'trimmed-mean' does not merge (it merges whole weights); use an aggregator that merges them: "
        "aggregate = \"kd-server\""]
    assert not (tmp_path / "run").exists()  # refused before any work


def test_every_recipe_builds_and_its_aggregator_merges_its_uploads():
    for name in fedcore.plugins.registry().names("recipe"):
        check_uploads(fedcore.recipe(name))  # building already checked it; a second look is the same answer


def test_undeclared_components_are_weights_only_and_declarations_combine():
    fedcore.Pipeline([DeclaresNothing()])  # whole-model share (undeclared) under an undeclared aggregator: fine
    assert describe(Upload.SUBMODEL | Upload.FEATURES) == "sliced submodels and per-sample features/logits"

    @attrs.frozen(eq=False, kw_only=True)
    class UploadsAux:
        """A local update that also sends auxiliary tensors up."""

        uploads: ClassVar[Upload] = Upload.WEIGHTS | Upload.AUXILIARY

        @fedcore.hookimpl
        def fedcore_local_update(self, client, share, data, state, ctx):
            raise NotImplementedError

    @attrs.frozen(eq=False, kw_only=True)
    class MergesAux(DeclaresNothing):
        """Merges weights and auxiliary tensors."""

        merges: ClassVar[Upload] = Upload.WEIGHTS | Upload.AUXILIARY

    with pytest.raises(ConfigError) as exc:
        fedcore.Pipeline([UploadsAux(), FedAvg()])
    assert _one_line(exc).startswith("local_update UploadsAux uploads auxiliary tensors, which aggregate 'fedavg' "
                                     "does not merge (it merges whole weights); ")
    fedcore.Pipeline([UploadsAux(), MergesAux()])


def test_a_declaration_must_be_an_upload():
    @attrs.frozen(eq=False, kw_only=True)
    class Wrong(DeclaresNothing):
        """Declares a string."""

        merges: ClassVar[str] = "weights"

    with pytest.raises(ConfigError, match=r"Wrong.merges must be a fedcore.types.Upload .*; got 'weights'"):
        fedcore.Pipeline([Wrong()])


# -- aggregators that need each client's own update (what DP-FedAvg and secure aggregation refuse) -------------

INDIVIDUAL = ("median", "trimmed-mean", "krum", "multi-krum", "bulyan", "centred-clipping", "lora-product-svd", "qffl",
              "masked-delta", "cos2p-aggregate", "kd-server")
OF_THE_MEAN = ("fedavg", "fedbuff", "fedasync", "fedadam", "fedyogi", "fedavgm", "fedadagrad")


def test_aggregators_declare_whether_they_need_each_update():
    from fedcore.types import needs_individual_updates

    registered = {e.name: e.obj for e in fedcore.list_components()}
    for name in INDIVIDUAL + OF_THE_MEAN:
        if name not in registered:  # a plugin that is not installed
            continue
        assert needs_individual_updates(registered[name]) is (name in INDIVIDUAL), name
    assert not needs_individual_updates(DeclaresNothing())


def test_the_helper_refuses_in_the_wrappers_words_and_a_declaration_must_be_a_bool():
    from fedcore.types import needs_individual_updates, require_mean_aggregator

    @attrs.frozen(eq=False, kw_only=True)
    class ByRank(DeclaresNothing):
        needs_individual_updates: ClassVar[bool] = True

    @attrs.frozen(eq=False, kw_only=True)
    class BySetting(DeclaresNothing):
        robust: bool = False

        def needs_individual_updates(self) -> bool:
            return self.robust

    with pytest.raises(ConfigError) as refused:
        require_mean_aggregator(fedcore.Pipeline([ByRank()]), "my-wrapper releases one noised mean")
    assert _one_line(refused) == ("my-wrapper releases one noised mean, but aggregate = 'ByRank' needs each client's "
                                  "own update; use an aggregator of the mean change (fedavg, fedbuff, fedasync or a "
                                  "server optimiser)")
    require_mean_aggregator(fedcore.Pipeline([BySetting()]), "w")  # a function of the mean: accepted
    require_mean_aggregator(fedcore.Pipeline.from_config({"aggregate": "fedavg"}), "w")
    with pytest.raises(ConfigError, match=r"^w, but aggregate = 'BySetting' needs"):
        require_mean_aggregator(fedcore.Pipeline([BySetting(robust=True)]), "w")

    @attrs.frozen(eq=False, kw_only=True)
    class Vague(DeclaresNothing):
        needs_individual_updates: ClassVar[str] = "yes"

    with pytest.raises(ConfigError, match=r"^Vague.needs_individual_updates must be True or False; got 'yes'$"):
        needs_individual_updates(Vague())


def test_non_weight_uploads_are_the_entries_the_share_labels():
    from fedcore.testing import tiny_model
    from fedcore.types import Share, non_weight_uploads

    module = tiny_model()
    names = tuple(module.state_dict())
    plain = Share(module=module, download=names, upload=names)
    assert non_weight_uploads(plain) == {}
    labelled = attrs.evolve(plain, kinds={names[1]: "features", names[0]: "logits", "not.uploaded": "labels"})
    assert non_weight_uploads(labelled) == dict(sorted({names[0]: "logits", names[1]: "features"}.items()))
