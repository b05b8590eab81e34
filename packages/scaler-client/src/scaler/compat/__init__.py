"""Other libraries' interfaces over Scaler: `scaler.compat.joblib` (a joblib backend) and `scaler.compat.ray`
(Ray's task API), each importing its library only when imported itself (docs/interfaces.md); and
`scaler.compat.earlier`, the list of the earlier engine's names that point at ours (docs/compatibility.md)."""
