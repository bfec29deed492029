"""The dashboard's pages: server-rendered HTML shells, their static files, and the chart library.

Pages carry no data. Each page's script calls the REST API (`/api/v1`) with the user's bearer
token, which the login page keeps in the tab's `sessionStorage`; the API's role rules decide
what every call may return, so a page never shows more than its user's role may see.

`create_router()` returns a FastAPI router; the server includes it with
`app.include_router(gpupool.web.create_router())`.
"""

from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

HERE = Path(__file__).parent
STATIC_DIR = HERE / "static"
TEMPLATE_DIR = HERE / "templates"
PREFIX = "/dashboard"

#: Scripts only from this origin (no inline code); Plotly needs inline styles on its SVG.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; connect-src 'self'; font-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


@dataclass(frozen=True, slots=True)
class Page:
    slug: str
    title: str
    script: str
    admin_only: bool = False


PAGES: tuple[Page, ...] = (
    Page("cluster", "Cluster", "cluster.js"),
    Page("queue", "Queue", "queue.js"),
    Page("usage", "Usage", "usage.js"),
    Page("tenants", "Tenants & quotas", "tenants.js"),
    Page("workloads", "My workloads", "workloads.js"),
    Page("admin", "Admin", "admin.js", admin_only=True),
)
PAGES_BY_SLUG = {p.slug: p for p in PAGES}


class ChartLibraryMissing(RuntimeError):
    """The `plotly` package (whose JS bundle draws the charts) is not installed."""


@lru_cache(maxsize=1)
def plotly_bundle() -> Path:
    """The `plotly.min.js` shipped inside the installed `plotly` Python package."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise ChartLibraryMissing(
            "the dashboard's charts need the 'plotly' package; install it with "
            "`pip install plotly` (it is a dependency of gpupool)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise ChartLibraryMissing(f"plotly is installed but {path} is missing; reinstall plotly")
    return path


@lru_cache(maxsize=64)
def _static_version(name: str) -> str:
    """A short content hash, appended to static URLs so browsers cache them safely."""
    data = (STATIC_DIR / name).read_bytes()
    return hashlib.sha256(data).hexdigest()[:12]


def static_url(name: str) -> str:
    return f"{PREFIX}/static/{name}?v={_static_version(name)}"


def create_router(*, api_prefix: str = "/api/v1") -> APIRouter:
    """The dashboard router: `/dashboard/<page>`, `/dashboard/login`, static files, Plotly."""
    templates = Jinja2Templates(directory=str(TEMPLATE_DIR))
    templates.env.globals.update(static=static_url, pages=PAGES, base=PREFIX, api=api_prefix)
    router = APIRouter()
    from gpupool.web.api import create_api_router

    router.include_router(create_api_router(), prefix=api_prefix)
    static_names = {p.name for p in STATIC_DIR.iterdir() if p.is_file()}

    def render(request: Request, template: str, **ctx: object) -> HTMLResponse:
        # Behind a path prefix (ASGI root_path, e.g. JupyterHub's /services/gpupool) every
        # link, script and API call the page makes starts with that prefix.
        root = request.scope.get("root_path", "").rstrip("/")
        ctx.update(
            base=root + PREFIX,
            api=root + api_prefix,
            static=lambda name: root + static_url(name),
        )
        resp = templates.TemplateResponse(request, template, ctx)
        resp.headers.update(SECURITY_HEADERS)
        resp.headers["Cache-Control"] = "no-cache"
        return resp

    def to_cluster(request: Request) -> RedirectResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        return RedirectResponse(f"{root}{PREFIX}/cluster", status_code=307)

    router.add_api_route("/", to_cluster, methods=["GET"], include_in_schema=False)
    router.add_api_route(PREFIX, to_cluster, methods=["GET"], include_in_schema=False)
    router.add_api_route(PREFIX + "/", to_cluster, methods=["GET"], include_in_schema=False)

    @router.get(PREFIX + "/login", response_class=HTMLResponse, include_in_schema=False)
    def login(request: Request) -> HTMLResponse:
        return render(request, "login.html", page=None, title="Log in")

    @router.get(PREFIX + "/static/{name}", include_in_schema=False)
    def static(name: str) -> FileResponse:
        if name not in static_names:
            raise HTTPException(404, f"no dashboard file named {name!r}")
        resp = FileResponse(STATIC_DIR / name)
        # Pages link static files with a content hash (?v=...), so a cached copy is never stale.
        resp.headers["Cache-Control"] = "public, max-age=31536000, immutable"
        resp.headers["X-Content-Type-Options"] = "nosniff"
        return resp

    @router.get("/favicon.ico", include_in_schema=False)
    def favicon() -> FileResponse:
        # Browsers ask for /favicon.ico where a page names no icon (the API's docs, errors).
        resp = FileResponse(STATIC_DIR / "favicon.svg", media_type="image/svg+xml")
        resp.headers["Cache-Control"] = "public, max-age=86400"
        return resp

    @router.get(PREFIX + "/vendor/plotly.min.js", include_in_schema=False)
    def plotly_js() -> Response:
        try:
            path = plotly_bundle()
        except ChartLibraryMissing as e:
            return Response(
                f"console.error({str(e)!r});",
                media_type="text/javascript",
                status_code=503,
            )
        resp = FileResponse(path, media_type="text/javascript")
        resp.headers["Cache-Control"] = "public, max-age=86400"
        return resp

    @router.get(PREFIX + "/{slug}", response_class=HTMLResponse, include_in_schema=False)
    def page(request: Request, slug: str) -> HTMLResponse:
        p = PAGES_BY_SLUG.get(slug)
        if p is None:
            resp = render(request, "not_found.html", page=None, title="Page not found", slug=slug)
            resp.status_code = 404
            return resp
        return render(request, f"{p.slug}.html", page=p, title=p.title)

    return router
