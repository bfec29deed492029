"""What gpupool writes for other systems to apply (pure renderers, no I/O): the NVIDIA GPU
Operator's device-plugin and MIG-manager configuration (`gpu_operator`)."""
