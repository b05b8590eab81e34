"""Other libraries' interfaces over Scaler: `scaler.compat.joblib` (a joblib backend) and `scaler.compat.ray`
(Ray's task API). Each imports its library only when imported itself (docs/interfaces.md)."""
