"""Bad input is one clear line and exit 2, with nothing written: configs, ``--set``, ``--out``, broken plugins."""
import textwrap

import pytest

import fedcore
from fedcore.cli import main

GOOD = textwrap.dedent("""\
    name = "refuse-me"
    rounds = 1
    num_clients = 3
    seed = 0
    dataset = { name = "synthetic", n = 96, n_test = 48 }
    model = "tiny-mlp"
    """)


def refused(capsys, args, out, *, code=2):
    """``fedcore ARGS`` exits ``code`` with exactly one ``fedcore: error:`` line and leaves ``out`` unwritten.

    Bad input exits 2; a broken installation (two distributions claiming one name) exits 1.
    """
    rc = main([*args, "--out", str(out), "--progress", "none"])
    _, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == code, err
    assert len(lines) == 1 and lines[0].startswith("fedcore: error: "), err
    assert not out.exists() or (out.is_file() and out.read_text() == "a file")  # nothing half-written
    return lines[0]


@pytest.mark.parametrize("content, message", [
    ("", "rounds"),
    ("rounds = [1,", "not valid TOML"),
    (bytes(range(256)) * 4, "not a text file"),
    (GOOD.replace("rounds = 1", "rounds = -3"), "rounds"),
    (GOOD + '[pipeline]\nschedule = { name = "uniform", fraction = 1.5 }\n', "fraction"),
    (GOOD + '[pipeline]\npartition = { name = "dirichlet", alpha = 0 }\n', "alpha"),
    (GOOD.replace("num_clients = 3", "num_clients = 5000").replace(
        '{ name = "synthetic", n = 96, n_test = 48 }', '"digits"'), "5000"),
    (GOOD.replace("rounds = 1", 'rounds = "ten"'), "rounds"),
    (GOOD.replace("seed = 0", "seed = 1.5"), "seed"),
], ids=["empty", "invalid-toml", "binary", "negative-rounds", "fraction", "alpha-zero", "too-many-clients",
        "rounds-type", "seed-type"])
def test_a_bad_config_is_one_line_and_exit_2_with_nothing_written(tmp_path, capsys, content, message):
    config = tmp_path / "bad.toml"
    config.write_bytes(content if isinstance(content, bytes) else content.encode())
    line = refused(capsys, ["run", str(config)], tmp_path / "run")
    assert message in line


def test_a_missing_config_a_malformed_set_and_out_at_a_file_are_refused(tmp_path, capsys):
    config = tmp_path / "ok.toml"
    config.write_text(GOOD)
    assert "nope.toml" in refused(capsys, ["run", str(tmp_path / "nope.toml")], tmp_path / "run")
    assert "KEY=VALUE" in refused(capsys, ["run", str(config), "--set", "rounds"], tmp_path / "run")
    assert "not valid TOML" in refused(capsys, ["run", str(config), "--set", "name=[1,"], tmp_path / "run")
    taken = tmp_path / "taken"
    taken.write_text("a file")
    assert "taken" in refused(capsys, ["run", str(config)], taken)


@pytest.mark.parametrize("word", ["plain-ascii", "ünïcødé", "名前", "x/ÿ.z"])
def test_a_bare_word_in_set_is_a_string_whatever_its_script(tmp_path, capsys, word):
    config = tmp_path / "ok.toml"
    config.write_text(GOOD)
    out = tmp_path / "run"
    assert main(["run", str(config), "--set", f"name={word}", "--out", str(out), "--progress", "none"]) == 0
    capsys.readouterr()
    assert f'name = "{word}"' in (out / "config.toml").read_text(encoding="utf-8")


def fake_distribution(root, dist, entry_point, module, body):
    """An installed distribution as importlib.metadata sees it: a dist-info with one ``fedcore`` entry point."""
    info = root / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[fedcore]\n{entry_point} = {module}\n")
    (root / f"{module}.py").write_text(body)


REGISTERS = ("import fedcore\nfrom fedcore.builtin import FedAvg\n\n"
             "class Mean(FedAvg):\n    \"\"\"Each distribution's own class under the one name.\"\"\"\n\n"
             "@fedcore.hookimpl\ndef fedcore_register_components(registry):\n    registry.add('shared-agg', Mean)\n")


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """Distributions written under tmp_path/site and put on sys.path; the catalogue is rebuilt before and after."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    yield site
    monkeypatch.undo()
    fedcore.plugins.refresh()


def test_a_plugin_that_fails_to_import_is_named_when_a_config_asks_for_it(tmp_path, capsys, installed):
    fake_distribution(installed, "fc-broken", "broken", "fc_broken_mod", "raise ImportError('needs libfoo 2.0')\n")
    fedcore.plugins.refresh()
    config = tmp_path / "c.toml"
    config.write_text(GOOD + '[pipeline]\naggregate = "broken-agg"\n')
    line = refused(capsys, ["run", str(config)], tmp_path / "run")
    assert "fc-broken" in line and "needs libfoo 2.0" in line
    config.write_text(GOOD)  # a config that does not need it still runs
    assert main(["run", str(config), "--out", str(tmp_path / "ok"), "--progress", "none"]) == 0


def test_two_distributions_registering_one_name_are_both_named(tmp_path, capsys, installed):
    fake_distribution(installed, "fc-one", "fcone", "fc_one_mod", REGISTERS)
    fake_distribution(installed, "fc-two", "fctwo", "fc_two_mod", REGISTERS)
    fedcore.plugins.refresh()
    config = tmp_path / "c.toml"
    config.write_text(GOOD + '[pipeline]\naggregate = "shared-agg"\n')
    line = refused(capsys, ["run", str(config)], tmp_path / "run", code=1)
    assert "'shared-agg'" in line and "fc-one" in line and "fc-two" in line


LAZY = ("import fedcore\nfrom fedcore.builtin import FedAvg\n\n"
        "def lazy_model(*, width: int = 4):\n"
        "    \"\"\"A model whose library is imported where it is built, as docs/plugins.md asks.\"\"\"\n"
        "    import fc_missing_lib  # not installed\n"
        "    return fc_missing_lib.build(width)\n\n"
        "class LazyMean(FedAvg):\n    \"\"\"Imports its library where it aggregates.\"\"\"\n\n"
        "    @fedcore.hookimpl\n    def fedcore_aggregate(self, model, updates, ctx):\n"
        "        import fc_missing_lib  # not installed\n        return fc_missing_lib.mean(updates)\n\n"
        "@fedcore.hookimpl\ndef fedcore_register_components(registry):\n"
        "    registry.add_model('lazy-net', lazy_model)\n    registry.add('lazy-mean', LazyMean)\n")


def test_a_plugin_whose_library_is_missing_registers_and_fails_in_one_line_when_built(tmp_path, capsys, installed):
    """Registration stays light, so a plugin registers even when a library it builds with is missing: describing
    its model works (settings come from the signature) and building it is one line naming the plugin and cause."""
    fake_distribution(installed, "fc-lazy", "lazy", "fc_lazy_mod", LAZY)
    fedcore.plugins.refresh()
    assert next(p for p in fedcore.list_plugins() if p.name == "lazy").ok
    assert main(["describe", "lazy-net"]) == 0
    assert "width" in capsys.readouterr().out
    config = tmp_path / "c.toml"
    config.write_text(GOOD.replace('model = "tiny-mlp"', 'model = "lazy-net"'))
    line = refused(capsys, ["run", str(config)], tmp_path / "run")
    assert "model 'lazy-net' of plugin 'lazy' (fc-lazy 1.0) cannot be built" in line, line
    assert line.endswith("ModuleNotFoundError: No module named 'fc_missing_lib'"), line
    config.write_text(GOOD + '[pipeline]\naggregate = "lazy-mean"\n')  # missing only once round 1 aggregates
    assert main(["run", str(config), "--out", str(tmp_path / "r2"), "--progress", "none"]) == 1
    assert capsys.readouterr().err == ("fedcore: error: ModuleNotFoundError: No module named 'fc_missing_lib' "
                                       "(imported by fc_lazy_mod of plugin 'lazy' (fc-lazy 1.0))\n")
