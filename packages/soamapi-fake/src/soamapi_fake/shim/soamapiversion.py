"""Symphony's ``soamapiversion`` puts the soamapi of the running interpreter on sys.path; the fake's is there."""
