"""The kubernetes engine (`gpupool up --engine kubernetes`): see `engine`, and
docs/kubernetes.md."""
