"""The web dashboard: page shells, static files and charts, served by the gpupool server.

`create_router()` gives the FastAPI router to include in the server's app.
"""

from gpupool.web.router import PAGES, create_router

__all__ = ["PAGES", "create_router"]
