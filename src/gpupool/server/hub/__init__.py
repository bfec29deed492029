"""The gpupool server's side of JupyterHub: `keeper` keeps the hub `gpupool up` runs alive,
`sso` signs hub users into the dashboard. The hub's own code is `gpupool.jupyterhub`."""
