"""In-process stand-ins for the cluster boundary (kubelet, API server), used by tests and the demo."""
