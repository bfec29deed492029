"""JupyterHub integration: the code that runs inside the hub (see docs/jupyterhub.md).

- `spawner.GpupoolSpawner`: notebooks get their GPUs from gpupool and wait in its queue;
- `authenticator.GpupoolAuthenticator`: log in with gpupool credentials, admins follow gpupool;
- `options`, `notices`, `client`: the form and validation, user banners, the API client.

What runs in the gpupool server lives elsewhere: `gpupool.server.hub` (the hub's generated
config, its start and the keeper that restarts it), `gpupool.engines.common.hub_launch` (the
executor that hands notebooks to the hub through `gpupool.engines.common.handoff`, the directory
both sides use) and `gpupool.web.hub_sso` (the dashboard's sign-on through the hub).

Nothing is imported here, so `gpupool up` can use `config` without loading JupyterHub.
"""
