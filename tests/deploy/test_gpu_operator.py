"""`gpupool k8s gpu-operator-config`: the GPU Operator's device-plugin and MIG-manager
ConfigMaps from gpupool's sharing modes (gpupool.deploy.gpu_operator), in the Operator's
formats, validated as Kubernetes objects; and the command (offline and against a server)."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from gpupool.cli.main import app
from gpupool.deploy.gpu_operator import (
    DEVICE_PLUGIN_LABEL,
    MIG_LABEL,
    MigLayout,
    OperatorConfigError,
    Options,
    default_layout,
    render,
)

H100 = ("NVIDIA H100 80GB HBM3", 81559)
A100_40 = ("NVIDIA A100-SXM4-40GB", 40960)


def gpu(node, index, sharing, model=H100):
    return {"uuid": f"GPU-{node}-{index}", "node": node, "index": index, "model": model[0],
            "memory_mib": model[1], "sharing": sharing, "health": "healthy"}  # fmt: skip


def plugin_conf(cfg, name):
    return yaml.safe_load(cfg.device_plugin["data"][name])


def mig_configs(cfg):
    conf = yaml.safe_load(cfg.mig["data"]["config.yaml"])
    assert conf["version"] == "v1"
    return conf["mig-configs"]


def test_shared_node_gets_time_slicing_in_the_device_plugin_format():
    cfg = render([gpu("a", 0, "shared"), gpu("a", 1, "shared")], Options(replicas=3))
    name = cfg.node_labels["a"][DEVICE_PLUGIN_LABEL]
    assert name == "gpupool-timeslice-3"
    conf = plugin_conf(cfg, name)
    assert conf["version"] == "v1"
    assert conf["flags"]["migStrategy"] == "none"
    ts = conf["sharing"]["timeSlicing"]
    assert ts["resources"] == [{"name": "nvidia.com/gpu", "replicas": 3}]
    assert ts["failRequestsGreaterThanOne"] is True
    assert MIG_LABEL not in cfg.node_labels["a"]


def test_exclusive_node_shares_nothing_and_the_default_entry_always_exists():
    cfg = render([gpu("a", 0, "exclusive")])
    assert cfg.node_labels == {"a": {DEVICE_PLUGIN_LABEL: "gpupool-exclusive"}}
    assert "sharing" not in plugin_conf(cfg, "gpupool-exclusive")
    assert "gpupool-exclusive" in render([gpu("b", 0, "shared")]).device_plugin["data"]


def test_nodes_with_the_same_setup_share_one_entry():
    cfg = render(
        [gpu(n, i, "shared") for n in ("a", "b") for i in (0, 1)] + [gpu("c", 0, "exclusive")]
    )
    assert set(cfg.device_plugin["data"]) == {"gpupool-exclusive", "gpupool-timeslice-4"}
    assert cfg.node_labels["a"] == cfg.node_labels["b"] != cfg.node_labels["c"]


def test_all_mig_node_gets_the_models_smallest_profile():
    cfg = render([gpu("m", 0, "mig"), gpu("m", 1, "mig")])
    name = cfg.node_labels["m"][MIG_LABEL]
    assert name == "gpupool-all-1g.10gbx7"
    assert mig_configs(cfg)[name] == [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}
    ]
    dp = plugin_conf(cfg, cfg.node_labels["m"][DEVICE_PLUGIN_LABEL])
    assert dp["flags"]["migStrategy"] == "mixed"
    assert "gpupool-all-disabled" in mig_configs(cfg)


def test_mixed_mig_node_lists_device_indexes():
    cfg = render([gpu("m", 1, "exclusive", A100_40), gpu("m", 0, "mig", A100_40)])
    entries = mig_configs(cfg)[cfg.node_labels["m"][MIG_LABEL]]
    assert entries == [
        {"devices": [0], "mig-enabled": True, "mig-devices": {"1g.5gb": 7}},
        {"devices": [1], "mig-enabled": False},
    ]
    assert cfg.node_labels["m"][DEVICE_PLUGIN_LABEL] == "gpupool-mig"


def test_mig_and_shared_on_one_node():
    cfg = render([gpu("m", 0, "mig"), gpu("m", 1, "shared")], Options(replicas=2))
    conf = plugin_conf(cfg, cfg.node_labels["m"][DEVICE_PLUGIN_LABEL])
    assert conf["flags"]["migStrategy"] == "mixed"
    assert conf["sharing"]["timeSlicing"]["resources"][0]["replicas"] == 2


def test_mig_layout_override_wins_over_the_default():
    layout = MigLayout.parse("H100=3g.40gb:2")
    cfg = render([gpu("m", 0, "mig")], Options(mig_layouts=(layout,)))
    assert mig_configs(cfg)[cfg.node_labels["m"][MIG_LABEL]][0]["mig-devices"] == {"3g.40gb": 2}


def test_unknown_mig_model_is_refused_with_what_to_pass():
    with pytest.raises(OperatorConfigError, match="--mig-layout"):
        render([gpu("m", 0, "mig", ("NVIDIA L40S", 46068))])


def test_exclusive_and_shared_on_one_node_is_refused():
    with pytest.raises(OperatorConfigError, match="node a has both exclusive and shared"):
        render([gpu("a", 0, "exclusive"), gpu("a", 1, "shared")])


@pytest.mark.parametrize(
    "text", ["H100", "H100=", "=1g.10gb:7", "H100=1g.10gb", "H100=1g.10gb:9", "H100=big:1"]
)
def test_bad_mig_layouts(text):
    with pytest.raises(OperatorConfigError, match="--mig-layout"):
        MigLayout.parse(text)


@pytest.mark.parametrize(
    ("model", "mib", "want"),
    [
        ("NVIDIA A100-SXM4-40GB", 40960, "1g.5gb"),
        ("NVIDIA A100 80GB PCIe", 81920, "1g.10gb"),
        ("NVIDIA H100 NVL", 95830, "1g.12gb"),
        ("NVIDIA H200", 143771, "1g.18gb"),
        ("NVIDIA A30", 24576, "1g.6gb"),
        ("H100-80GB", 81920, "1g.10gb"),  # gpupool's simulated model names
        ("NVIDIA A10", 23028, None),  # not the A100; no MIG
        ("NVIDIA L4", 23034, None),
    ],
)
def test_default_layouts(model, mib, want):
    got = default_layout(model, mib)
    assert (got[0][0] if got else None) == want


def test_bad_input():
    with pytest.raises(OperatorConfigError, match="lacks sharing"):
        render([{"node": "a", "index": 0, "model": "x", "memory_mib": 1}])
    with pytest.raises(OperatorConfigError, match="not one of"):
        render([gpu("a", 0, "timeslice")])
    with pytest.raises(OperatorConfigError, match="--replicas"):
        Options(replicas=1)


def test_commands_point_the_operator_and_label_nodes():
    cfg = render([gpu("a", 0, "shared"), gpu("m", 0, "mig")])
    cmds = cfg.commands()
    assert cmds[0].startswith("kubectl patch clusterpolicies.nvidia.com/cluster-policy")
    patch = json.loads(cmds[0].split("-p ", 1)[1].strip("'"))
    assert patch["spec"]["devicePlugin"]["config"] == {
        "name": "gpupool-device-plugin-config",
        "default": "gpupool-exclusive",
    }
    assert patch["spec"]["migManager"]["config"]["name"] == "gpupool-mig-config"
    assert cmds[1] == (
        "kubectl label node a nvidia.com/device-plugin.config=gpupool-timeslice-4 --overwrite"
    )
    assert cmds[2].startswith("kubectl label node m nvidia.com/device-plugin.config=gpupool-mig ")
    assert "nvidia.com/mig.config=gpupool-all-1g.10gbx7" in cmds[2]


def test_generated_configmaps_are_valid_kubernetes_objects(kube_validate, tmp_path):
    gpus = [gpu("a", 0, "shared"), gpu("b", 0, "mig", A100_40), gpu("b", 1, "exclusive", A100_40)]
    cfg = render(gpus, Options(namespace="nvidia-gpu-operator"))
    path = tmp_path / "op.yaml"
    path.write_text(cfg.to_yaml())
    docs = list(yaml.safe_load_all(path.read_text()))
    assert [d["metadata"]["name"] for d in docs] == [
        "gpupool-device-plugin-config",
        "gpupool-mig-config",
    ]
    assert {d["metadata"]["namespace"] for d in docs} == {"nvidia-gpu-operator"}
    kube_validate(path)


def test_cli_offline(tmp_path):
    src = tmp_path / "gpus.json"
    src.write_text(json.dumps([gpu("a", 0, "shared"), gpu("a", 1, "shared")]))
    r = CliRunner().invoke(
        app, ["k8s", "gpu-operator-config", "--from-file", str(src), "--replicas", "8"]
    )
    assert r.exit_code == 0, r.output
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    assert "gpupool-timeslice-8" in docs[0]["data"]
    assert "kubectl label node a nvidia.com/device-plugin.config=gpupool-timeslice-8" in r.stderr

    out = tmp_path / "out"
    r = CliRunner().invoke(
        app, ["k8s", "gpu-operator-config", "--from-file", str(src), "-o", str(out)]
    )
    assert r.exit_code == 0, r.output
    assert "timeslice-4" in (out / "gpu-operator-config.yaml").read_text()
    script = (out / "label-nodes.sh").read_text()
    assert script.startswith("#!/bin/sh") and "kubectl label node a" in script


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("not json", "is not JSON"),
        ('{"x": 1}', "give a JSON list of GPUs"),
        (json.dumps([gpu("a", 0, "mig", ("NVIDIA L4", 23034))]), "--mig-layout"),
    ],
)
def test_cli_bad_input_exits_2(tmp_path, content, says):
    src = tmp_path / "gpus.json"
    src.write_text(content)
    r = CliRunner().invoke(app, ["k8s", "gpu-operator-config", "--from-file", str(src)])
    assert r.exit_code == 2
    assert says in r.output
    r = CliRunner().invoke(
        app, ["k8s", "gpu-operator-config", "--from-file", str(tmp_path / "missing.json")]
    )
    assert r.exit_code == 2 and "cannot read --from-file" in r.output
