"""A cluster whose pods live: kube-controller-manager and kwok beside the e2e control plane (cluster.py)."""
