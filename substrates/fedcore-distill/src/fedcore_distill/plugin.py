"""Entry point ``distill`` (group ``fedcore``): registers ``edge-share``, ``edge-kd-train``, ``kd-server``,
``kd-eval``, ``p-group``, the ``kd.*`` models and the ``kd.synth-patterns`` data set. Imports classes only."""
import fedcore
from fedcore_distill.edge import EdgeKDTrain
from fedcore_distill.evaluate import KDEval
from fedcore_distill.pgroup import PGroupPartition
from fedcore_distill.server import KDServer
from fedcore_distill.share import EdgeShare
from fedcore_distill.synth import synth_patterns_dataset
from fedcore_distill.zoo import edge_model, fedavg_cnn_model, fedavg_vit_model, fedgkt_model, fedvkd_model


@fedcore.hookimpl
def fedcore_register_components(registry):
    registry.add("edge-share", EdgeShare, help="the client's own edge CNN; only server logits come down")
    registry.add("edge-kd-train", EdgeKDTrain, help="edge CE + soft KD to server logits, then the feature uplink")
    registry.add("kd-server", KDServer, help="persistent server trainer on uploaded features (hard/soft KD, CE)")
    registry.add("kd-eval", KDEval, help="server o extractor_k accuracy (mean over clients), per head, edge")
    registry.add("p-group", PGroupPartition, help="Fang et al.'s p-group split (p = 1/M is IID)")
    registry.add_model("kd.fedvkd", fedvkd_model, help="edge ResNet + hybrid ViT server (cls + dist tokens)")
    registry.add_model("kd.fedgkt", fedgkt_model, help="edge ResNet + bottleneck-ResNet server")
    registry.add_model("kd.fedavg-vit", fedavg_vit_model, help="edge extractor + ViT encoder as one model")
    registry.add_model("kd.fedavg-cnn", fedavg_cnn_model, help="edge extractor + bottleneck ResNet as one model")
    registry.add_model("kd.edge", edge_model, help="the edge ResNet alone")
    registry.add_dataset("kd.synth-patterns", synth_patterns_dataset, help="seeded coloured glyphs, 3 x 16 x 16")
