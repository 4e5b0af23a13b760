"""What every gpuq command that runs against a cluster shares: its common flags, read into typed options
and checked (:mod:`.flags`), and its logs, plain or JSON lines (:mod:`.logs`)."""
