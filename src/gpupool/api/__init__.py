"""The API's models (pydantic): what goes over the wire of /api/v1, one definition for the
server (which validates and documents with them), the client (`gpupool.client`, which parses
answers into them) and the OpenAPI document (docs/openapi.json). They depend on the domain's
vocabulary only: no server, store or engine code.

Request bodies (`In`) refuse unknown fields; answers (`Out`) ignore them, so that a client
reads a newer server's answers.
"""
