"""Server logic. Routers are thin: they parse, call one service function, and shape output."""
