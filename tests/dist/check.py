"""The user's path from the built distributions (``make wheel-check``, run by .ci/run after
``make test`` and ``make demo``).

Each distribution is installed alone (with what it depends on, from the index) into a new
virtual environment in a directory outside the tree, and tests/dist/smoke.py runs there,
from that directory, with nothing of the checkout on its path:
- the manylinux wheel, on this Python;
- a wheel built from the sdist and repaired by auditwheel, on every other CPython the
  classifiers name (pyproject.toml): each must be found here, or the check fails naming it;
- the pure-Python wheel (py3-none-any), with the C parts absent;
- the sdist with no C compiler (``CC=false``): it installs, as pure Python, and the first
  producer says so in one log line.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
SEARCH = (
    "/usr/bin",
    "/usr/local/bin",
    "/root/.pyenv/versions/*/bin",
    os.path.expanduser("~/.pyenv/versions/*/bin"),
)


def classified_versions() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = [
        re.fullmatch(r"Programming Language :: Python :: (3\.\d+)", c)
        for c in project["classifiers"]
    ]
    return [m.group(1) for m in found if m]


def interpreter(version: str) -> str | None:
    """A CPython ``version`` found on PATH, in /usr/bin or in pyenv's versions."""
    names = [shutil.which(f"python{version}")]
    for folder in SEARCH:
        names += sorted(glob.glob(os.path.join(folder, f"python{version}")))
    for name in names:
        if name and os.access(name, os.X_OK):
            out = subprocess.run(
                [name, "-c", "import sys, venv; print(sys.version_info[:2])"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            if out.returncode == 0 and out.stdout.strip() == str(
                tuple(map(int, version.split(".")))
            ):
                return name
    return None


def sh(*command: str, env: dict[str, str] | None = None, cwd: str | None = None) -> str:
    started = time.monotonic()
    out = subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"wheel-check FAILED: {' '.join(command)}\n{out.stdout}\n{out.stderr}")
    print(f"  {time.monotonic() - started:5.1f} s  {' '.join(Path(c).name for c in command[:3])}")
    return out.stdout + out.stderr


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.startswith("SHMKAFKA_")
    }
    env["SHMKAFKA_SENDER_IDLE_EXIT_MS"] = "500"
    return {**env, **extra}


def try_install(
    python: str, place: Path, name: str, what: list[str], expected: str, env: dict[str, str]
) -> None:
    """A new venv at ``place``/``name`` with ``what`` installed, then the smoke run there."""
    print(f"{name}: {' '.join(Path(w).name for w in what)} ({expected})")
    venv = place / name
    sh(python, "-m", "venv", str(venv))
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-cache-dir"]
    sh(*pip, *what, env=env)
    run_dir = place / f"{name}-run"
    run_dir.mkdir()
    shutil.copy(ROOT / "tests" / "dist" / "smoke.py", run_dir)
    out = sh(str(venv / "bin" / "python"), "smoke.py", expected, env=clean_env(), cwd=str(run_dir))
    print("  " + out.strip().splitlines()[-1])


def main(dist: str) -> int:
    dist_dir = Path(dist).resolve()
    manylinux = glob.glob(str(dist_dir / "*manylinux*.whl"))
    pure = glob.glob(str(dist_dir / "*-py3-none-any.whl"))
    sdists = glob.glob(str(dist_dir / "*.tar.gz"))
    if not (manylinux and pure and sdists):
        raise SystemExit(
            f"wheel-check: {dist_dir} lacks a manylinux wheel, the pure wheel or the sdist: "
            "run make dist"
        )
    versions = classified_versions()
    found = {v: interpreter(v) for v in versions}
    missing = [v for v, path in found.items() if path is None]
    if missing:
        raise SystemExit(
            f"wheel-check FAILED: the classifiers name Python {', '.join(missing)}, "
            "which this machine does not have: the tests would go missing"
        )
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    auditwheel = str(Path(sys.executable).parent / "auditwheel")
    path_env = clean_env(PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    with tempfile.TemporaryDirectory(prefix="shmkafka-wheel-check-") as tmp:
        place = Path(tmp)
        for version, python in found.items():
            assert python is not None
            if version == here:
                wheel = manylinux[0]
            else:  # a wheel of this Python's ABI, from the sdist, repaired as make dist does
                built = place / f"built-{version}"
                sh(
                    python,
                    "-m",
                    "pip",
                    "wheel",
                    "-q",
                    "--no-deps",
                    "-w",
                    str(built),
                    sdists[0],
                    env=clean_env(),
                )
                sh(
                    auditwheel,
                    "repair",
                    "-w",
                    str(built / "repaired"),
                    *glob.glob(str(built / "*.whl")),
                    env=path_env,
                )
                wheel = glob.glob(str(built / "repaired" / "*.whl"))[0]
            try_install(python, place, f"py{version}", [wheel], "built", clean_env())
        try_install(sys.executable, place, "pure-wheel", pure, "pure", clean_env())
        try_install(
            sys.executable,
            place,
            "sdist-no-compiler",
            ["--no-binary", "shmkafka", sdists[0]],
            "pure",
            clean_env(CC="false"),
        )
    print(
        f"wheel-check: ok on Python {', '.join(versions)}, the pure wheel and the sdist "
        "without a compiler"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "dist"))
