"""The control plane: REST API, auth, persistence and the reconcilers that drive the engine."""
