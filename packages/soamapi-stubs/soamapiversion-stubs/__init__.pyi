# `import soamapiversion` (shipped with Symphony) puts the soamapi of the running interpreter's version on
# sys.path; it has no names of its own to use.
