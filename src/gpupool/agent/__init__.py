"""The node agent (`gpupool agent`): runs on a GPU host of a cluster, samples its GPUs, finds
out whose each GPU process is (gpupool's workload marker, a Slurm job id, a Kubernetes pod
UID) and reports to the gpupool server with a node credential.

- `attribute`: process -> workload id, Slurm job, pod (reads `/proc`, parses with
  `gpupool.telemetry.cgroups`);
- `report`: a sample -> the JSON body of `POST /api/v1/nodes/{name}/report`;
- `loop`: the sampling and reporting loop, and the HTTP reporter.

It uses the telemetry library and talks to the server only over its API (no store, no
server code), like the CLI.
"""
