"""Build hook for the optional C log scanner; all package metadata lives in pyproject.toml.

``reprobuild.logs._logscan`` runs ``reprobuild.logs.parser.LogParser``'s state machine over
bytes, for whole files. It is ``optional``: where no C compiler (or no Python headers) is
available the build still succeeds without it, and ``reprobuild.logs.reader`` falls back to
pure Python (``reprobuild.logs.reader.native_available()`` tells which one is in use).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "reprobuild.logs._logscan",
            ["reprobuild/logs/_logscan.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
