"""gpupool's mutating admission webhook: `kubectl apply` of a Pod or Job in a tenant
namespace goes through gpupool's queue (native.py says which objects and what changes).

`Webhook.review(AdmissionReview)` is the decision (no I/O but `submit`): a candidate object
is submitted to gpupool (`EngineEnv.submit`: the API's own checks, so work that can never
run is refused here with the API's reason) and answered with a JSON patch that gates or
suspends it; anything else is allowed unchanged. `app()` is the small ASGI app that serves
it at `POST /mutate` (and `GET /healthz`); `WebhookServer` serves that app over HTTPS on
its own port (kube-apiserver calls webhooks over TLS only; the API server's own port is
not involved: the server names no engine).

A submitter is the admission request's user (`userInfo.username`), mapped to a gpupool user
by `EngineEnv.submit` (same name and allowed to submit to the tenant, else the tenant's
default submitter). A dry run (`kubectl apply --dry-run=server`) is answered with the patch
and nothing is queued (the webhook declares `sideEffects: NoneOnDryRun`).
"""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpupool.domain import Tenant
from gpupool.domain.errors import DomainError, ValidationError
from gpupool.engines.common.engine import EngineError, ExternalAnswer, ExternalWork
from gpupool.engines.kubernetes import manifests as m
from gpupool.engines.kubernetes import native

log = logging.getLogger(__name__)

Submit = Callable[[ExternalWork], ExternalAnswer]


@dataclass(frozen=True)
class WebhookSettings:
    """The admission webhook (`gpupool up --engine kubernetes` flags): off unless `port` is
    set. `cert_dir` holds `tls.crt` / `tls.key` made by cert-manager; empty: gpupool makes
    and renews its own for `service` and patches `config`'s caBundle (webhook_tls.py)."""

    port: int = field(
        default=0,
        metadata={
            "flag": "--kubernetes-webhook-port",
            "metavar": "PORT",
            "help": "Serve the admission webhook (kubectl-applied Pods and Jobs join the "
            "queue) over HTTPS on this port; 0: off. The Helm chart sets 8443.",
        },
    )
    host: str = "0.0.0.0"  # noqa: S104 - the webhook Service reaches the pod's address
    cert_dir: str = field(
        default="",
        metadata={
            "flag": "--kubernetes-webhook-tls",
            "metavar": "DIR",
            "help": "tls.crt and tls.key of the webhook (cert-manager's Secret); empty: "
            "gpupool makes and renews its own and patches its webhook's caBundle.",
        },
    )
    service: str = field(
        default="gpupool-webhook.gpupool.svc",
        metadata={
            "flag": "--kubernetes-webhook-service",
            "metavar": "DNS",
            "help": "The webhook Service's DNS name (<service>.<namespace>.svc), for the "
            "certificate gpupool makes.",
        },
    )
    config: str = field(
        default="gpupool",
        metadata={
            "flag": "--kubernetes-webhook-config",
            "metavar": "NAME",
            "help": "The name of gpupool's mutating webhook configuration, whose caBundle "
            "it keeps.",
        },
    )


def tenant_namespaces(tenants: Sequence[Tenant], prefix: str) -> dict[str, str]:
    """namespace -> leaf tenant path (the namespaces tenancy.py makes)."""
    names = [t.name for t in tenants]
    leaves = [n for n in names if not any(o.startswith(n + "/") for o in names)]
    return {m.namespace_for(t, prefix): t for t in leaves}


def _answer(uid: str, **response: Any) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": uid, **response},
    }


def deny(uid: str, code: int, message: str) -> dict[str, Any]:
    return _answer(uid, allowed=False, status={"code": code, "message": f"gpupool: {message}"})


class Webhook:
    """The admission decision (see the module docstring)."""

    def __init__(
        self,
        submit: Submit,
        tenants: Callable[[], Sequence[Tenant]],
        prefix: str,
        *,
        engine: str = "kubernetes",
    ):
        self.submit = submit
        self.tenants = tenants
        self.prefix = prefix
        self.engine = engine
        self.reviews = 0
        self.queued = 0
        self.refused = 0

    def review(self, body: Mapping[str, Any]) -> dict[str, Any]:
        req = body.get("request") or {}
        uid = str(req.get("uid", ""))
        self.reviews += 1
        obj = req.get("object") or {}
        if req.get("operation") != "CREATE" or not native.candidate(obj):
            return _answer(uid, allowed=True)
        ns = str(req.get("namespace") or (obj.get("metadata") or {}).get("namespace") or "")
        tenant = tenant_namespaces(self.tenants(), self.prefix).get(ns)
        if tenant is None:
            return _answer(uid, allowed=True)  # not a tenant's namespace: not gpupool's
        user = str((req.get("userInfo") or {}).get("username") or "")
        try:
            ask = native.ask_of(obj, ns, tenant)
            if req.get("dryRun"):
                answer = ExternalAnswer("dry-run", user)
            else:
                answer = self.submit(
                    ExternalWork(
                        tenant=tenant,
                        user=user,
                        engine=self.engine,
                        name=f"{ask.kind.lower()}/{ask.name}",
                        command=native.command_of(ask),
                        gpus=ask.gpus,
                        gpu_model=ask.gpu_model,
                        # a deleted Pod cannot come back; a Job is suspended and resumed
                        requeue_on_preemption=ask.kind == "Job",
                    )
                )
        except (native.Refusal, ValidationError) as e:  # the API's own reasons
            self.refused += 1
            return deny(uid, 422, str(e))
        except DomainError as e:  # not allowed to submit there (the API's 403)
            self.refused += 1
            return deny(uid, 403, str(e))
        except EngineError as e:
            return deny(uid, 503, str(e))
        self.queued += 1
        patch = native.hold_patch(obj, answer.workload_id, answer.owner)
        return _answer(
            uid,
            allowed=True,
            patchType="JSONPatch",
            patch=base64.b64encode(json.dumps(patch).encode()).decode(),
        )

    def app(self) -> Any:
        """The ASGI app: `POST /mutate` (an AdmissionReview), `GET /healthz`."""
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse, PlainTextResponse
        from starlette.routing import Route

        async def mutate(request: Request) -> JSONResponse:
            try:
                body = await request.json()
            except ValueError:
                return JSONResponse({"message": "the body is not an AdmissionReview"}, 400)
            uid = str((body.get("request") or {}).get("uid", ""))
            try:
                return JSONResponse(self.review(body))
            except Exception as e:  # noqa: BLE001 - a bug here must answer, not hang kubectl
                log.exception("admission review failed")
                return JSONResponse(deny(uid, 500, f"gpupool's webhook failed: {e}"))

        async def healthz(request: Request) -> PlainTextResponse:
            return PlainTextResponse("ok")

        return Starlette(
            routes=[
                Route("/mutate", mutate, methods=["POST"]),
                Route("/healthz", healthz, methods=["GET"]),
            ]
        )


class WebhookServer:
    """Serves `app` over HTTPS with `cert_file` / `key_file` on `host:port` (0: a free one)
    in a thread; `restart()` after the certificate was rotated."""

    def __init__(self, app: Any, cert_file: str, key_file: str, host: str, port: int):
        self.app, self.cert_file, self.key_file = app, cert_file, key_file
        self.host, self.port = host, port
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        import socket

        import uvicorn

        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            lifespan="off",
            ssl_certfile=self.cert_file,
            ssl_keyfile=self.key_file,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True, name="k8s-webhook"
        )
        self._thread.start()
        return self.port

    @property
    def started(self) -> bool:
        return bool(self._server is not None and self._server.started)

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = self._thread = None

    def restart(self) -> None:
        self.stop()
        self.start()
