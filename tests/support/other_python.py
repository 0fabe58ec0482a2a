"""A Python of another minor version than this one (and so than the test server's, whose
workers run this Python or, in the container, the same minor version), for clients that are
not the server: ``SPARK_CDC_OTHER_PYTHON``, else a ``python3.X`` on ``PATH`` or under pyenv.

Where none is found the tests that need one skip, saying how to provide one, unless
``SPARK_CDC_REQUIRE_OTHER_PYTHON=1`` (CI) makes that a failure.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

OTHER_PYTHON_ENV = "SPARK_CDC_OTHER_PYTHON"
REQUIRE_ENV = "SPARK_CDC_REQUIRE_OTHER_PYTHON"
# Preferred first: the versions the users have beside a 3.11 server.
_MINORS = (12, 10, 13, 11)


def minor_of(python: str) -> str | None:
    done = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.stdout.strip() if done.returncode == 0 else None


def _candidates() -> list[str]:
    found: list[str] = []
    for minor in _MINORS:
        on_path = shutil.which(f"python3.{minor}")
        if on_path:
            found.append(on_path)
        pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
        found += sorted(glob.glob(str(pyenv / f"3.{minor}.*" / "bin" / "python")), reverse=True)
    return found


def other_python() -> Path:
    """The interpreter, or a skip (a failure under ``SPARK_CDC_REQUIRE_OTHER_PYTHON=1``)."""
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    given = os.environ.get(OTHER_PYTHON_ENV)
    for python in [given] if given else _candidates():
        minor = minor_of(python)
        if minor is not None and minor != here and tuple(map(int, minor.split("."))) >= (3, 10):
            return Path(python)
    why = (
        f"no Python 3.10+ of another minor version than this {here} was found: set "
        f"{OTHER_PYTHON_ENV} to one (e.g. python3.12) to test clients that are not the server"
    )
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(why)
    pytest.skip(why)
