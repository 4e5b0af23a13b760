"""The scheduler against a real cluster: informer feed, Kubernetes backend, run loop."""
