"""The chart's admission webhook (docs/kubernetes.md, "Submitting with kubectl"): sent only
tenant namespaces' Pods and Jobs, never gpupool's own pods, served by the server's webhook
port behind its own Service, TLS by gpupool (which patches only its own caBundle) or by
cert-manager; a guard on every update of a marked object, failing closed; the webhook port's
NetworkPolicy. Rendered with helm; the objects' validity is test_helm_chart's."""

from __future__ import annotations

from tests.deploy.test_helm_chart import by_kind, one, render


def _args(objs: list[dict]) -> list[str]:
    (c,) = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return c["args"]


def test_the_webhook_sees_only_tenant_namespaces_and_fails_closed(helm):
    objs = render(helm, {})
    cfg = one(objs, "MutatingWebhookConfiguration", "gpupool")
    hook, guard = cfg["webhooks"]
    assert hook["name"] == "admission.gpupool.dev"
    assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
    assert hook["namespaceSelector"]["matchExpressions"] == [
        {"key": "gpupool.dev/tenant", "operator": "Exists"},
        {"key": "gpupool.dev/webhook", "operator": "NotIn", "values": ["disabled"]},
    ]
    assert hook["objectSelector"]["matchExpressions"] == [
        {"key": "app.kubernetes.io/managed-by", "operator": "NotIn", "values": ["gpupool"]}
    ]
    assert {(r["apiGroups"][0], r["resources"][0]) for r in hook["rules"]} == {
        ("", "pods"),
        ("batch", "jobs"),
    }
    assert all(r["operations"] == ["CREATE"] for r in hook["rules"])
    # the guard: updates of marked objects (not a queued Job's pods), always fail closed
    assert guard["name"] == "guard.gpupool.dev" and guard["failurePolicy"] == "Fail"
    assert guard["sideEffects"] == "None"
    assert guard["objectSelector"]["matchExpressions"] == [
        {"key": "gpupool.dev/native-workload", "operator": "Exists"}
    ]
    assert {(r["apiGroups"][0], r["resources"][0]) for r in guard["rules"]} == {
        ("", "pods"),
        ("batch", "jobs"),
    }
    assert all(r["operations"] == ["UPDATE"] for r in guard["rules"])
    (cond,) = guard["matchConditions"]
    assert "ownerReferences" in cond["expression"]
    assert guard["clientConfig"] == hook["clientConfig"]
    assert "caBundle" not in hook["clientConfig"]  # gpupool writes it
    svc = hook["clientConfig"]["service"]
    assert (svc["name"], svc["namespace"], svc["path"]) == (
        "gp-gpupool-webhook",
        "gpupool",
        "/mutate",
    )
    one(objs, "Service", "gp-gpupool-webhook")
    args = _args(objs)
    assert args[args.index("--kubernetes-webhook-port") + 1] == "8443"
    assert args[args.index("--kubernetes-webhook-service") + 1] == "gp-gpupool-webhook.gpupool.svc"
    assert "--kubernetes-webhook-tls" not in args


def test_failure_policy_ignore_and_off(helm):
    hook, guard = one(
        render(helm, {"webhook.failurePolicy": "Ignore"}), "MutatingWebhookConfiguration"
    )["webhooks"]
    assert hook["failurePolicy"] == "Ignore" and guard["failurePolicy"] == "Fail"
    objs = render(helm, {"webhook.enabled": "false"})
    assert not by_kind(objs, "MutatingWebhookConfiguration")
    assert "--kubernetes-webhook-port" not in _args(objs)


def test_cert_manager_issues_the_certificate_and_injects_the_ca(helm):
    objs = render(helm, {"webhook.certManager.enabled": "true"})
    cfg = one(objs, "MutatingWebhookConfiguration")
    assert cfg["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "gpupool/gp-gpupool-webhook"
    }
    cert = one(objs, "Certificate")
    assert cert["spec"]["dnsNames"] == ["gp-gpupool-webhook.gpupool.svc"]
    assert cert["spec"]["secretName"] == "gp-gpupool-webhook-tls"
    args = _args(objs)
    assert args[args.index("--kubernetes-webhook-tls") + 1] == "/etc/gpupool/webhook-tls"
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    assert {"name": "webhook-tls", "secret": {"secretName": "gp-gpupool-webhook-tls"}} in pod[
        "volumes"
    ]


def _webhook_ingress(objs: list[dict]) -> list[dict]:
    pol = one(objs, "NetworkPolicy", "gp-gpupool-server")
    return [
        r for r in pol["spec"]["ingress"] if {"port": "webhook", "protocol": "TCP"} in r["ports"]
    ]


def test_the_webhook_port_is_open_unless_its_peers_are_named(helm):
    (rule,) = _webhook_ingress(render(helm, {}))
    assert "from" not in rule  # kube-apiserver's address is the cluster's; a review queues nothing
    objs = render(helm, {"networkPolicy.webhookFrom[0].ipBlock.cidr": "10.0.0.0/24"})
    (rule,) = _webhook_ingress(objs)
    assert rule["from"] == [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
