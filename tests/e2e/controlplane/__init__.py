"""The e2e control plane: build.sh (binaries), harness.py (start/stop), ``python -m`` entry."""
