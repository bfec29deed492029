"""JupyterHub integration: the code that runs inside the hub (see docs/jupyterhub.md).

- `spawner.GpupoolSpawner`: notebooks get their GPUs from gpupool and wait in its queue;
- `authenticator.GpupoolAuthenticator`: log in with gpupool credentials, admins follow gpupool;
- `config`: the hub `gpupool up` runs (generated config, command, start, readiness);
- `options`, `notices`, `client`: the form and validation, user banners, the API client.

What runs in the gpupool server lives beside it: `gpupool.executors.hub_launch` (the
executor that hands notebooks to the hub, through `gpupool.executors.handoff`, the shared
directory both sides use) and `gpupool.server.hub` (the hub keeper and the dashboard's
single sign-on).

Nothing is imported here, so `gpupool up` can use `config` without loading JupyterHub.
"""
