"""HTTP routers: thin; parse, authorize through `auth.authenticated`, call one service."""
