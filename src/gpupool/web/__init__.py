"""The web dashboard: page shells, static files and charts, served by the gpupool server.

`create_router()` gives the FastAPI router to include in the server's app;
`app.add_middleware(ServePrefix)` also serves everything under JupyterHub's
`/services/gpupool` prefix, so the hub's Services menu entry works through the hub's proxy.
"""

from gpupool.web.prefix import HUB_SERVICE_PREFIX, ServePrefix
from gpupool.web.router import PAGES, create_router

__all__ = ["HUB_SERVICE_PREFIX", "PAGES", "ServePrefix", "create_router"]
