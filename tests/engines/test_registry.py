"""The engine registry (`gpupool.engines.registry`) and the flags `gpupool up` builds from
each engine's options (`gpupool.engines.common.options`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpupool.engines.common.engine import Engine
from gpupool.engines.common.options import OptionsError, build, flags
from gpupool.engines.registry import ENGINES


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_each_entry_loads_an_engine_over_its_options(name):
    spec = ENGINES[name]
    engine_class, options_class = spec.engine_class(), spec.options_class()
    assert issubclass(engine_class, Engine) and engine_class.name == name
    assert dataclasses.is_dataclass(options_class)
    engine = spec.create(options_class())  # nothing is opened yet
    assert isinstance(engine, engine_class) and engine.options == options_class()


def test_the_fake_and_the_template_engines_are_not_offered():
    assert set(ENGINES) == {"local", "kubernetes", "slurm"}


def test_flags_are_unique_and_keep_their_documented_names():
    names = [f.name for spec in ENGINES.values() for f in flags(spec.name, spec.options_class())]
    assert len(names) == len(set(names))
    for name in ("--simulate", "--user-mode", "--mps", "--kubeconfig", "--run-as-user"):
        assert name in names
    # without an explicit name, a flag is --<engine>-<field>
    slurm = ENGINES["slurm"]
    assert {f.name for f in flags("slurm", slurm.options_class())} == {
        "--slurm-partition",
        "--slurm-output-dir",
        "--slurm-notebook-command",
    }


def _kube(**values: object):
    return build("kubernetes", ENGINES["kubernetes"].options_class(), values)


def test_kubernetes_options_from_flags_fill_the_nested_settings():
    o = _kube(kubernetes__pods__image="img:1", kubernetes__pods__run_as_user=4242)
    assert o.pods.image == "img:1"
    assert (o.pods.run_as_user, o.pods.run_as_group) == (4242, 4242)  # the flag sets both
    assert o.tenancy.block_cloud_metadata is True
    default = _kube(kubernetes__pods__image="", kubernetes__tenancy__home_storage_class=None)
    assert default == _kube()  # not given, or empty: the field's default


def test_a_negating_flag_turns_its_field_off_and_the_hidden_positive_one_wins():
    off = "kubernetes__tenancy__block_cloud_metadata__off"
    on = "kubernetes__tenancy__block_cloud_metadata__on"
    assert _kube(**{off: True}).tenancy.block_cloud_metadata is False
    assert _kube(**{off: True, on: True}).tenancy.block_cloud_metadata is True


def test_a_value_outside_the_choices_is_refused_naming_the_flag():
    with pytest.raises(OptionsError, match="--pod-security must be one of restricted, baseline"):
        _kube(kubernetes__pods__pod_security="privileged")


def test_local_options_default_to_this_host():
    import socket

    o = build("local", ENGINES["local"].options_class(), {"local__simulate": "2xH100-80GB"})
    assert (o.node, o.simulate, o.user_mode) == (socket.gethostname(), "2xH100-80GB", "auto")


def test_slurm_paths_arrive_as_paths():
    o = build("slurm", ENGINES["slurm"].options_class(), {"slurm__output_dir": Path("/x")})
    assert o.output_dir == Path("/x") and o.partition is None


def test_up_refuses_an_engine_the_registry_does_not_name(monkeypatch):
    from gpupool.cli import up as up_module
    from gpupool.cli.main import app

    monkeypatch.setattr(up_module, "serve", lambda **kw: pytest.fail("served"))
    r = CliRunner().invoke(app, ["up", "--engine", "nomad"])
    assert r.exit_code == 2
    assert "--engine must be one of local, kubernetes, slurm, not 'nomad'" in r.output


def test_up_hands_the_chosen_engines_options_to_serve(monkeypatch):
    from gpupool.cli import up as up_module
    from gpupool.cli.main import app

    seen: dict = {}
    monkeypatch.setattr(up_module, "serve", lambda **kw: seen.update(kw))
    args = ["up", "--engine", "slurm", "--slurm-partition", "gpu", "--image", "ignored"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert seen["engine"] == "slurm"
    assert seen["options"] == ENGINES["slurm"].options_class()(partition="gpu")


def test_up_takes_several_engines_each_with_its_own_options(monkeypatch):
    from gpupool.cli import up as up_module
    from gpupool.cli.main import app

    seen: dict = {}
    monkeypatch.setattr(up_module, "serve", lambda **kw: seen.update(kw))
    args = ["up", "--engine", "local", "--engine", "slurm", "--simulate", "2xH100-80GB"]
    r = CliRunner().invoke(app, [*args, "--slurm-partition", "gpu"])
    assert r.exit_code == 0, r.output
    names = [name for name, _ in seen["engines"]]
    assert names == ["local", "slurm"] and seen["engine"] == "local"  # the first: default
    local, slurm = (opts for _, opts in seen["engines"])
    assert local.simulate == "2xH100-80GB"
    assert slurm == ENGINES["slurm"].options_class()(partition="gpu")


def test_up_refuses_an_engine_named_twice(tmp_path):
    import typer

    from gpupool.cli.up import engine_options, serve

    twice = [("local", engine_options("local", {}))] * 2
    with pytest.raises(typer.Exit) as e:
        serve(data_dir=tmp_path, host="127.0.0.1", port=1, log_level="info", engines=twice)
    assert e.value.exit_code == 2
