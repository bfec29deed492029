"""JupyterHub integration: the code that runs inside the hub (see docs/jupyterhub.md).

- `spawner.GpupoolSpawner`: notebooks wait in gpupool's queue, gpupool's engine runs them on
  the GPUs granted and reports where they listen (one spawner for every engine; a plain
  client of gpupool's API);
- `authenticator.GpupoolAuthenticator`: log in with gpupool credentials, admins follow gpupool;
- `options`, `notices`, `client`: the form and validation, user banners, the API client.

What runs in the gpupool server lives elsewhere: `gpupool.server.hub` (the hub's generated
config, its start and the keeper that restarts it), `gpupool.server.services.notebooks` (which
notebooks it takes), each engine's `notebooks` module (how it runs them) and
`gpupool.web.hub_sso` (the dashboard's sign-on through the hub).

Nothing is imported here, so `gpupool up` can use `config` without loading JupyterHub.
"""
