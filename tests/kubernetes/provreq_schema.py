"""The structural rules of the ProvisioningRequest CRD (``autoscaling.x-k8s.io/v1``, the
Cluster Autoscaler's `provisioningrequests.autoscaling.x-k8s.io`, cluster-autoscaler/apis),
restated as a JSON Schema for the fake API server (fakeapi_provisioning.py) to validate
creates the way kube-apiserver validates a custom resource against its CRD. Only the rules,
in our own words: required fields, types, name patterns, bounds; unknown fields in `spec`
are refused (the CRD's schema is structural and kube-apiserver prunes or, with strict
field validation, refuses them)."""

from __future__ import annotations

from typing import Any

import jsonschema

DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "autoscaling.x-k8s.io/v1"},
        "kind": {"const": "ProvisioningRequest"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string", "pattern": DNS_SUBDOMAIN, "maxLength": 253}},
        },
        "spec": {
            "type": "object",
            "required": ["podSets", "provisioningClassName"],
            "additionalProperties": False,
            "properties": {
                "provisioningClassName": {
                    "type": "string",
                    "pattern": DNS_SUBDOMAIN,
                    "maxLength": 253,
                },
                "parameters": {
                    "type": "object",
                    "maxProperties": 100,
                    "additionalProperties": {"type": "string", "maxLength": 255},
                },
                "podSets": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 32,
                    "items": {
                        "type": "object",
                        "required": ["count", "podTemplateRef"],
                        "additionalProperties": False,
                        "properties": {
                            "count": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1},
                            "podTemplateRef": {
                                "type": "object",
                                "required": ["name"],
                                "additionalProperties": False,
                                "properties": {
                                    "name": {
                                        "type": "string",
                                        "pattern": DNS_SUBDOMAIN,
                                        "maxLength": 253,
                                    }
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


def problems(obj: Any) -> list[str]:
    """What is wrong with `obj` as a ProvisioningRequest (empty: valid)."""
    v = jsonschema.Draft202012Validator(SCHEMA)
    return [f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in v.iter_errors(obj)]
