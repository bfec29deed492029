"""gpupool's mutating admission webhook: `kubectl apply` of a Pod or Job in a tenant
namespace goes through gpupool's queue (native.py says which objects and what changes).

`Webhook.review(AdmissionReview)` is the decision. It creates nothing in gpupool: anyone who
reaches its port can post a review, so its answer is only a JSON patch for the API server to
apply, worth nothing to anyone else.

- **CREATE** of a candidate object in a tenant namespace: the read-only checks of a
  submission (`check`: the API's own, so work that can never run is refused here with the
  API's reason), then a patch that gates or suspends it and writes a fresh workload id, the
  requesting user (`userInfo.username`) and a signature over both (native_sign.py), always
  overwriting what the object carried. The workload is made later, when the watch sees the
  stored object (native_intake.py).
- **UPDATE** of a queued object (it carries `gpupool.dev/native-workload`): refused when it
  changes that label, the submitter or the signature, when it changes what makes an object
  gpupool's own (`native.is_own`: the managed-by label, a controlling Job), when it changes a
  queued Job's parallelism or its pods' GPUs, or when it removes the gate or unsuspends
  while gpupool holds it, unless gpupool itself is releasing it (`releasing`).

`app()` is the small ASGI app that serves it at `POST /mutate` (and `GET /healthz`);
`WebhookServer` serves that app over HTTPS on its own port (kube-apiserver calls webhooks
over TLS only; the API server's own port is not involved: the server names no engine).
A dry run (`kubectl apply --dry-run=server`) is answered like any review (the webhook
declares `sideEffects: None`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpupool.clock import Clock
from gpupool.domain import Tenant
from gpupool.domain.errors import DomainError, ValidationError
from gpupool.engines.common.engine import EngineError, ExternalWork
from gpupool.engines.kubernetes import manifests as m
from gpupool.engines.kubernetes import native
from gpupool.engines.kubernetes.native_sign import WINDOW_S, Signer

log = logging.getLogger(__name__)

#: the API's read-only checks of a submission (raises its ValidationError / PermissionDenied)
Check = Callable[[ExternalWork], None]


def work_of(ask: native.Ask, tenant: str, user: str, engine: str) -> ExternalWork:
    """What `ask` submits to gpupool as `user` (a Kubernetes user name)."""
    return ExternalWork(
        tenant=tenant,
        user=user,
        engine=engine,
        name=f"{ask.kind.lower()}/{ask.name}",
        command=native.command_of(ask),
        gpus=ask.gpus,
        gpu_model=ask.gpu_model,
        # a deleted Pod cannot come back; a Job is suspended and resumed
        requeue_on_preemption=ask.kind == "Job",
    )


def _marks(obj: Mapping[str, Any]) -> tuple[str | None, ...]:
    """What attributes a queued object: its workload label (a Job's template's too), its
    submitter and signature annotations."""
    meta = obj.get("metadata") or {}
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    out = [labels.get(native.NATIVE), notes.get(native.SUBMITTER), notes.get(native.SIGNATURE)]
    if obj.get("kind") == "Job":
        tmeta = ((obj.get("spec") or {}).get("template") or {}).get("metadata") or {}
        out.append((tmeta.get("labels") or {}).get(native.NATIVE))
    return tuple(out)


def _asked(obj: Mapping[str, Any]) -> tuple[int, int]:
    """What a queued object was admitted for: its pods (a Job's parallelism) and each
    pod's GPUs."""
    pods = native.parallelism(obj) if obj.get("kind") == "Job" else 1
    return pods, native.pod_gpus(native.pod_spec_of(obj))


def _ownership(obj: Mapping[str, Any]) -> tuple[object, ...]:
    """What makes gpupool take an object as its own (`native.is_own`): its managed-by label
    and its controlling Jobs."""
    meta = obj.get("metadata") or {}
    jobs = [
        o.get("uid")
        for o in meta.get("ownerReferences") or []
        if o.get("kind") == "Job" and o.get("controller")
    ]
    return ((meta.get("labels") or {}).get(m.MANAGED_BY), tuple(jobs))


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
    #: how far an object's creationTimestamp may be from its review (native_sign.py)
    sign_window_s: float = WINDOW_S
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


def _patched(uid: str, patch: list[dict[str, Any]]) -> dict[str, Any]:
    body = base64.b64encode(json.dumps(patch).encode()).decode()
    return _answer(uid, allowed=True, patchType="JSONPatch", patch=body)


class Webhook:
    """The admission decision (see the module docstring)."""

    def __init__(
        self,
        check: Check,
        tenants: Callable[[], Sequence[Tenant]],
        prefix: str,
        signer: Signer,
        clock: Clock,
        *,
        engine: str = "kubernetes",
    ):
        self.check = check
        self.tenants = tenants
        self.prefix = prefix
        self.signer = signer
        self.clock = clock
        self.engine = engine
        self.reviews = 0
        self.held = 0
        self.refused = 0
        self._releasing: set[str] = set()
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def releasing(self, kind: str, namespace: str, name: str) -> Iterator[None]:
        """While gpupool's own release patch of this object is under way."""
        ref = f"{kind}/{namespace}/{name}"
        with self._lock:
            self._releasing.add(ref)
        try:
            yield
        finally:
            with self._lock:
                self._releasing.discard(ref)

    def review(self, body: Mapping[str, Any]) -> dict[str, Any]:
        req = body.get("request") or {}
        uid = str(req.get("uid", ""))
        self.reviews += 1
        op = req.get("operation")
        if op == "UPDATE":
            return self._guard(uid, req)
        obj = req.get("object") or {}
        if op != "CREATE" or not native.candidate(obj):
            return _answer(uid, allowed=True)
        ns = str(req.get("namespace") or (obj.get("metadata") or {}).get("namespace") or "")
        tenant = tenant_namespaces(self.tenants(), self.prefix).get(ns)
        if tenant is None:
            return _answer(uid, allowed=True)  # not a tenant's namespace: not gpupool's
        user = str((req.get("userInfo") or {}).get("username") or "")
        try:
            ask = native.ask_of(obj, ns, tenant)
            self.check(work_of(ask, tenant, user, self.engine))
        except (native.Refusal, ValidationError) as e:  # the API's own reasons
            self.refused += 1
            return deny(uid, 422, str(e))
        except DomainError as e:  # not allowed to submit there (the API's 403)
            self.refused += 1
            return deny(uid, 403, str(e))
        except EngineError as e:
            return deny(uid, 503, str(e))
        self.held += 1
        wid = native.new_workload_id()
        signature = self.signer.sign(obj, ns, user, wid, self.clock.now())
        return _patched(uid, native.hold_patch(obj, wid, user, signature))

    def _guard(self, uid: str, req: Mapping[str, Any]) -> dict[str, Any]:
        """An UPDATE: keep a queued object's marks and hold (see the module docstring)."""
        old, new = req.get("oldObject") or {}, req.get("object") or {}
        if new.get("kind") not in ("Pod", "Job") or native.is_own(old):
            return _answer(uid, allowed=True)
        if not (_marks(old)[0] or _marks(new)[0]):
            return _answer(uid, allowed=True)  # never queued through gpupool
        meta = new.get("metadata") or {}
        ns = meta.get("namespace") or req.get("namespace")
        ref = f"{new.get('kind')}/{ns}/{meta.get('name')}"
        if _marks(old) != _marks(new):
            self.refused += 1
            return deny(
                uid,
                403,
                f"the label {native.NATIVE} and the annotations {native.SUBMITTER} and "
                f"{native.SIGNATURE} of work queued in gpupool cannot be added, changed or "
                "removed; delete the object and create it again",
            )
        if _ownership(old) != _ownership(new):
            self.refused += 1
            return deny(
                uid,
                403,
                f"the label {m.MANAGED_BY} and a controlling Job owner mark gpupool's own "
                "objects; they cannot be added to or changed on work queued in gpupool",
            )
        if _asked(old) != _asked(new):
            self.refused += 1
            pods, gpus = _asked(old)
            return deny(
                uid,
                403,
                f"gpupool queued this {new.get('kind')} for {pods} pod(s) (its parallelism) of "
                f"{gpus} GPUs each; delete it and create it again to change them",
            )
        if native.held(old) and not native.held(new):
            with self._lock:
                ours = ref in self._releasing
            if not ours:
                self.refused += 1
                return deny(
                    uid,
                    403,
                    f"{ref} waits in gpupool's queue and only gpupool releases it (removes "
                    f"the gate {native.GATE} or unsuspends it); `kubectl describe` shows why "
                    "it waits, `gpupool queue` its place",
                )
        return _answer(uid, allowed=True)

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
