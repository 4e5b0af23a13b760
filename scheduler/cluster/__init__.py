"""The cluster as the scheduler holds it: node rows as numpy arrays, label columns, the API objects
plugins read, and per-pod-class results kept current row by row (design.md "Layout")."""
