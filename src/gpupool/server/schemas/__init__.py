"""API schemas (pydantic): what goes over the wire. Separate from domain types and store rows;
`gpupool.server.schemas.convert` turns domain values into these."""
