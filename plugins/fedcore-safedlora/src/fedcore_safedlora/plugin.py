"""Entry point ``safedlora`` (group ``fedcore``): registers the components. Imports classes only, does no work."""
import fedcore
from fedcore_safedlora import models
from fedcore_safedlora.baselines import FedAvgScratch, FedBit, FedFFT, FedPer, Local, PersonalEval
from fedcore_safedlora.sa_fedlora import FedLoRA, SAFedLoRA


@fedcore.hookimpl
def fedcore_register_components(registry):
    registry.add("sa-fedlora", SAFedLoRA)
    registry.add("fedlora", FedLoRA)
    registry.add("fedfft", FedFFT)
    registry.add("fedavg-scratch", FedAvgScratch)
    registry.add("fedbit", FedBit)
    registry.add("fedper", FedPer)
    registry.add("local", Local)
    registry.add("personal-eval", PersonalEval)
    registry.add_model("safedlora.micro-vit-pretrained", models.pretrained_micro_vit)
    registry.add_dataset("safedlora.digits-target", models.target_digits)
