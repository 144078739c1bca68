"""Entry point ``safedlora`` (group ``fedcore``): registers the components and recipes. Imports classes only."""
import fedcore
from fedcore_safedlora import models
from fedcore_safedlora.baselines import (
    BitFitShare,
    FromScratch,
    FullShare,
    LocalShare,
    PersonalUpdate,
)
from fedcore_safedlora.plan import SAFedLoRAPlan
from fedcore_safedlora.recipes import RECIPES
from fedcore_safedlora.stage_share import StageShare
from fedcore_safedlora.stage_update import StageUpdate
from fedcore_safedlora.training import EpochsUpdate


@fedcore.hookimpl
def fedcore_register_components(registry):
    registry.add("sa-fedlora-plan", SAFedLoRAPlan)
    registry.add("sa-fedlora-share", StageShare)
    registry.add("sa-fedlora-sgd", StageUpdate)
    registry.add("full-share", FullShare)
    registry.add("bitfit-share", BitFitShare)
    registry.add("local-share", LocalShare)
    registry.add("from-scratch", FromScratch)
    registry.add("safedlora-sgd", EpochsUpdate)
    registry.add("personal-sgd", PersonalUpdate)
    for name, recipe in RECIPES.items():
        registry.add_recipe(name, recipe)
    registry.add_model("safedlora.micro-vit-pretrained", models.pretrained_micro_vit)
    registry.add_dataset("safedlora.digits-target", models.target_digits)
