"""Build hook for the optional C log scanner; all package metadata lives in pyproject.toml.

``reprobuild._logscan`` is a byte-for-byte port of ``reprobuild.logparse.LogParser``'s state
machine. It is ``optional``: where no C compiler (or no Python headers) is available the
build still succeeds without it, and ``reprobuild.logparse`` falls back to pure Python
(``reprobuild.logparse.native_available()`` tells which one is in use).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "reprobuild._logscan",
            ["reprobuild/_logscan.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
