"""The NVIDIA GPU Operator's configuration from gpupool's per-GPU sharing modes (pure).

`render(gpus, options)` takes GPUs as `GET /api/v1/gpus` lists them (`node`, `index`, `model`,
`memory_mib`, `sharing`) and returns an `OperatorConfig`:

- the device plugin's ConfigMap: one entry per distinct node setup, each a device-plugin config
  file (`version: v1`, `flags.migStrategy`, and for nodes whose GPUs are `shared`,
  `sharing.timeSlicing.resources: [{name: nvidia.com/gpu, replicas: N}]`); a node picks its
  entry with the label `nvidia.com/device-plugin.config`;
- the MIG manager's ConfigMap (key `config.yaml`, mig-parted's `version: v1` / `mig-configs`
  format), one config per distinct MIG layout; a node picks it with `nvidia.com/mig.config`;
- the node labels that select them.

Rules: the device plugin applies time-slicing per node, so a node's non-MIG GPUs must be all
`exclusive` or all `shared` (else `OperatorConfigError` says which node). A `mig` GPU is cut
into the MIG layout gpupool schedules on it (its `mig_layout`, set with `gpupool gpu
mig-layout`); one without a layout into the `--mig-layout` entry of its model, else the
model's smallest profile as many times as it fits (A30, A100, H100, H800, H200); others
need a `--mig-layout`.
Time-slicing gives no memory or fault isolation: the generated file says so.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from gpupool.domain import ValidationError
from gpupool.domain.mig import counts as mig_counts
from gpupool.domain.mig import layout_for_gpu

DEVICE_PLUGIN_LABEL = "nvidia.com/device-plugin.config"
MIG_LABEL = "nvidia.com/mig.config"
DEVICE_PLUGIN_CONFIGMAP = "gpupool-device-plugin-config"
MIG_CONFIGMAP = "gpupool-mig-config"
#: the device-plugin entry for nodes that share nothing (also the Operator's default)
EXCLUSIVE = "gpupool-exclusive"
#: the MIG config that turns MIG off on every GPU of a node
ALL_DISABLED = "gpupool-all-disabled"
MODES = ("exclusive", "shared", "mig")

_PROFILE = re.compile(r"^[0-9]+(c\.[0-9]+)?g\.[0-9]+gb(\+[a-z0-9]+)?$")
_LABEL_VALUE = re.compile(r"[^-A-Za-z0-9_.]")


class _Dumper(yaml.SafeDumper):
    """Writes multi-line strings (the embedded config files) as literal blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


class OperatorConfigError(ValueError):
    """The GPUs or options cannot be expressed in the Operator's configuration; the message
    says what to change."""


@dataclass(frozen=True, slots=True)
class MigLayout:
    """A model's MIG devices: `model` matches GPU models case-insensitively as a substring."""

    model: str
    devices: tuple[tuple[str, int], ...]

    @staticmethod
    def parse(text: str) -> MigLayout:
        """'H100=1g.10gb:7' or 'A100-40GB=3g.20gb:1,2g.10gb:2'."""
        model, sep, rest = text.partition("=")
        if not sep or not model.strip() or not rest.strip():
            raise OperatorConfigError(
                f"--mig-layout {text!r}: write MODEL=PROFILE:COUNT[,PROFILE:COUNT], "
                "e.g. H100=1g.10gb:7"
            )
        devices: list[tuple[str, int]] = []
        for part in rest.split(","):
            profile, _, count = part.strip().partition(":")
            if not _PROFILE.match(profile) or not count.isdigit() or not 1 <= int(count) <= 7:
                raise OperatorConfigError(
                    f"--mig-layout {text!r}: {part.strip()!r} is not PROFILE:COUNT with a MIG "
                    "profile such as 1g.10gb and a count from 1 to 7"
                )
            devices.append((profile, int(count)))
        return MigLayout(model.strip(), tuple(devices))


#: (model family, largest memory in MiB of that variant) -> the smallest profile, how many fit
_DEFAULT_LAYOUTS: tuple[tuple[str, int, str, int], ...] = (
    ("A30", 25 * 1024, "1g.6gb", 4),
    ("A100", 41 * 1024, "1g.5gb", 7),
    ("A100", 82 * 1024, "1g.10gb", 7),
    ("H100", 82 * 1024, "1g.10gb", 7),
    ("H800", 82 * 1024, "1g.10gb", 7),
    ("H100", 96 * 1024, "1g.12gb", 7),
    ("H200", 144 * 1024, "1g.18gb", 7),
)


def default_layout(model: str, memory_mib: int) -> tuple[tuple[str, int], ...] | None:
    """The model's smallest MIG profile times the number that fits, or None if unknown."""
    name = model.upper()
    for family, max_mib, profile, count in _DEFAULT_LAYOUTS:
        if re.search(rf"(^|[^A-Z0-9]|GH?){family}($|[^0-9])", name) and memory_mib <= max_mib:
            return ((profile, count),)
    return None


@dataclass(frozen=True, slots=True)
class Options:
    """`replicas`: time-slicing replicas of one shared GPU; `mig_layouts`: overrides, first
    match wins; `namespace`: the GPU Operator's namespace."""

    replicas: int = 4
    mig_layouts: tuple[MigLayout, ...] = ()
    namespace: str = "gpu-operator"

    def __post_init__(self) -> None:
        if not 2 <= self.replicas <= 64:
            raise OperatorConfigError(f"--replicas {self.replicas}: give 2 to 64")


@dataclass(frozen=True, slots=True)
class OperatorConfig:
    """The two ConfigMaps (Kubernetes objects as dicts) and node -> {label: value}."""

    device_plugin: dict[str, Any]
    mig: dict[str, Any]
    node_labels: dict[str, dict[str, str]] = field(default_factory=dict)

    def manifests(self) -> list[dict[str, Any]]:
        return [self.device_plugin, self.mig]

    def to_yaml(self) -> str:
        head = (
            "# Written by `gpupool k8s gpu-operator-config` from gpupool's GPU sharing modes.\n"
            "# Time-slicing (the gpupool-timeslice-* entries) shares a GPU with no memory or\n"
            "# fault isolation between pods; MIG devices are isolated by the GPU.\n"
        )
        return head + yaml.dump_all(self.manifests(), Dumper=_Dumper, sort_keys=False)

    def commands(self) -> list[str]:
        """What to run after `kubectl apply -f`: point the Operator at the ConfigMaps, then
        label the nodes."""
        patch = {
            "spec": {
                "devicePlugin": {"config": {"name": DEVICE_PLUGIN_CONFIGMAP, "default": EXCLUSIVE}},
                "migManager": {"config": {"name": MIG_CONFIGMAP}},
            }
        }
        out = [
            "kubectl patch clusterpolicies.nvidia.com/cluster-policy --type merge "
            f"-p '{json.dumps(patch, separators=(',', ':'))}'"
        ]
        for node, labels in sorted(self.node_labels.items()):
            pairs = " ".join(f"{k}={v}" for k, v in sorted(labels.items()))
            out.append(f"kubectl label node {node} {pairs} --overwrite")
        return out


def _gpu_layout(gpu: Mapping[str, Any], options: Options) -> tuple[tuple[str, int], ...]:
    model = str(gpu["model"])
    if gpu.get("mig_layout"):
        try:
            insts = layout_for_gpu(model, int(gpu["memory_mib"]), str(gpu["mig_layout"]))
        except ValidationError as e:
            raise OperatorConfigError(
                f"GPU {gpu['index']} of node {gpu['node']}: {e}; set a layout that fits "
                "(gpupool gpu mig-layout)"
            ) from None
        return tuple(mig_counts(insts))
    for layout in options.mig_layouts:
        if layout.model.lower() in model.lower():
            return layout.devices
    found = default_layout(model, int(gpu["memory_mib"]))
    if found is None:
        raise OperatorConfigError(
            f"GPU {gpu['index']} of node {gpu['node']} ({model}) is in mig mode but gpupool "
            "knows no MIG layout for this model: pass --mig-layout MODEL=PROFILE:COUNT"
        )
    return found


def _check(gpus: Sequence[Mapping[str, Any]]) -> None:
    for g in gpus:
        missing = [k for k in ("node", "index", "model", "memory_mib", "sharing") if k not in g]
        if missing:
            raise OperatorConfigError(
                f"a GPU entry lacks {', '.join(missing)}: give GPUs as GET /api/v1/gpus lists them"
            )
        if g["sharing"] not in MODES:
            raise OperatorConfigError(
                f"GPU {g['index']} of node {g['node']}: sharing {g['sharing']!r} is not one of "
                + ", ".join(MODES)
            )


def _configmap(name: str, namespace: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "gpupool"},
        },
        "data": data,
    }


def _device_plugin_entry(mig: bool, replicas: int | None) -> tuple[str, str]:
    """(entry name, device-plugin config file) for a node with MIG GPUs or not, sharing its
    other GPUs by time-slicing in `replicas` or not."""
    name = "gpupool-" + "-".join(
        ([] if not mig else ["mig"]) + ([f"timeslice-{replicas}"] if replicas else [])
    )
    if name == "gpupool-":
        name = EXCLUSIVE
    conf: dict[str, Any] = {"version": "v1", "flags": {"migStrategy": "mixed" if mig else "none"}}
    if replicas:
        conf["sharing"] = {
            "timeSlicing": {
                "renameByDefault": False,
                # asking for 2 replicas would not give more of the GPU: refuse it
                "failRequestsGreaterThanOne": True,
                "resources": [{"name": "nvidia.com/gpu", "replicas": replicas}],
            }
        }
    return name, yaml.safe_dump(conf, sort_keys=False)


def _mig_entry(layout: list[tuple[int, tuple[tuple[str, int], ...] | None]]) -> tuple[str, list]:
    """(config name, mig-parted device groups) for a node's GPUs: index -> devices, or None
    for MIG off. GPUs with the same layout share one group."""
    groups: dict[tuple[tuple[str, int], ...] | None, list[int]] = {}
    for index, devs in sorted(layout, key=lambda x: x[0]):
        groups.setdefault(devs, []).append(index)
    entries: list[dict[str, Any]] = []
    for devs, indexes in groups.items():
        entry: dict[str, Any] = {"devices": "all" if len(groups) == 1 else indexes}
        entry["mig-enabled"] = devs is not None
        if devs is not None:
            entry["mig-devices"] = {p: n for p, n in devs}
        entries.append(entry)
    if len(groups) == 1:
        (devs,) = groups
        if devs is None:
            return ALL_DISABLED, entries
        name = "gpupool-all-" + "-".join(f"{p}x{n}" if n > 1 else p for p, n in devs)
        name = _LABEL_VALUE.sub("-", name)
        if len(name) <= 63:
            return name, entries
    digest = hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()[:10]
    return f"gpupool-mig-{digest}", entries


def render(gpus: Iterable[Mapping[str, Any]], options: Options | None = None) -> OperatorConfig:
    """The Operator's configuration for `gpus` (see the module docstring)."""
    options = options or Options()
    gpus = list(gpus)
    _check(gpus)
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    for g in gpus:
        by_node.setdefault(str(g["node"]), []).append(g)

    plugin: dict[str, str] = dict([_device_plugin_entry(False, None)])
    mig_configs: dict[str, list] = {ALL_DISABLED: [{"devices": "all", "mig-enabled": False}]}
    labels: dict[str, dict[str, str]] = {}
    for node, node_gpus in sorted(by_node.items()):
        modes = {g["sharing"] for g in node_gpus if g["sharing"] != "mig"}
        if len(modes) > 1:
            raise OperatorConfigError(
                f"node {node} has both exclusive and shared GPUs, but the device plugin "
                "time-slices a node's GPUs all or none: set its non-MIG GPUs to one mode "
                "(gpupool gpu set-sharing) and run again"
            )
        has_mig = any(g["sharing"] == "mig" for g in node_gpus)
        entry, conf = _device_plugin_entry(
            has_mig, options.replicas if modes == {"shared"} else None
        )
        plugin[entry] = conf
        labels[node] = {DEVICE_PLUGIN_LABEL: entry}
        if has_mig:
            layout = [
                (int(g["index"]), _gpu_layout(g, options) if g["sharing"] == "mig" else None)
                for g in node_gpus
            ]
            name, entries = _mig_entry(layout)
            mig_configs[name] = entries
            labels[node][MIG_LABEL] = name
    mig_file = yaml.safe_dump({"version": "v1", "mig-configs": mig_configs}, sort_keys=False)
    return OperatorConfig(
        device_plugin=_configmap(DEVICE_PLUGIN_CONFIGMAP, options.namespace, plugin),
        mig=_configmap(MIG_CONFIGMAP, options.namespace, {"config.yaml": mig_file}),
        node_labels=labels,
    )
