"""The ``reprobuild`` command: a thin layer of argument parsing over the Python API."""
