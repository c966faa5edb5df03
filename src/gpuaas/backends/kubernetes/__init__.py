"""The Kubernetes backend: manifests for a target scheduler (Kueue, Volcano, KAI) and the
client that applies and follows them (see docs/kubernetes.md)."""
