"""The MIG manager's config from the layouts gpupool schedules (`mig_layout` of each GPU)."""

from __future__ import annotations

import pytest

from gpupool.deploy.gpu_operator import MIG_LABEL, MigLayout, OperatorConfigError, Options, render
from tests.deploy.test_gpu_operator import gpu, mig_configs


def with_layout(node, index, layout):
    return {**gpu(node, index, "mig"), "mig_layout": layout}


def test_each_gpus_layout_becomes_its_mig_devices():
    cfg = render([with_layout("m", 0, "all-3g.40gb"), with_layout("m", 1, "all-balanced")])
    entries = mig_configs(cfg)[cfg.node_labels["m"][MIG_LABEL]]
    assert entries == [
        {"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
        {
            "devices": [1],
            "mig-enabled": True,
            "mig-devices": {"2g.20gb": 1, "1g.10gb": 2, "3g.40gb": 1},
        },
    ]


def test_the_gpus_layout_wins_over_mig_layout_option():
    opts = Options(mig_layouts=(MigLayout.parse("H100=1g.10gb:7"),))
    cfg = render([with_layout("m", 0, "all-3g.40gb")], opts)
    (entry,) = mig_configs(cfg)[cfg.node_labels["m"][MIG_LABEL]]
    assert entry["mig-devices"] == {"3g.40gb": 2}


def test_a_layout_that_does_not_fit_says_what_to_do():
    with pytest.raises(OperatorConfigError, match="gpupool gpu mig-layout"):
        render([with_layout("m", 0, "all-1g.5gb")])


def test_generated_mig_config_is_valid(kube_validate, tmp_path):
    cfg = render([with_layout("m", 0, "3g.40gb:1,1g.10gb:4"), gpu("n", 0, "exclusive")])
    path = tmp_path / "operator.yaml"
    path.write_text(cfg.to_yaml())
    kube_validate(path)
