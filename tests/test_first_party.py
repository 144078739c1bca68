"""fedcore.first_party (which in-repo distribution provides which name) agrees with the real registrations."""
from collections import defaultdict

import fedcore
from fedcore import first_party


def test_index_matches_what_each_installed_first_party_distribution_registers():
    registered: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for entry in fedcore.plugins.registry().entries():
        registered[entry.distribution][entry.kind].add(entry.name)
    for dist, (package, names) in first_party.DISTRIBUTIONS.items():
        assert {k: set(v) for k, v in names.items()} == dict(registered[dist]), dist
        plugin = next(p for p in fedcore.list_plugins() if p.distribution == dist)
        assert plugin.module.partition(".")[0] == package and first_party.distribution_of(plugin.module) == dist
    # every first-party distribution in the dev environment is indexed; the core's own names are not, nor the
    # third-party fixture's
    assert set(registered) - set(first_party.DISTRIBUTIONS) == {"fedcore", "fedcore-robust"}
    assert first_party.PACKAGES["lora-share"] == "fedcore-lora" and "trimmed-mean" not in first_party.PACKAGES


def test_hint_names_the_distribution_to_install():
    assert first_party.provider("split-share") == "fedcore-split"
    assert first_party.provider("sl", "recipe") == "fedcore-split"
    assert first_party.provider("sl") is None  # a recipe, not a component
    assert first_party.provider("open_clip", "model") == "fedcore-clip"
    assert first_party.provider("open_clip") is None  # a model, not a component
    assert first_party.provider("fedavg") is None and first_party.provider("no-such-thing") is None
