"""Build hook: compile the C extensions in place, one shared object each (of one or more C
files sharing the extension's ``_internal.h``). Each is the C twin of a Python module that
stays the reference:

- ``pool/_append.c``: the append and the Sender's drain (``pool/accumulator.py``), seal
  (``pool/sealing.py``) and finish (``pool/finishing.py``);
- ``producer/_tracker.c``: the futures of a send (``producer/futures.py``), and send() and
  produce() for the common record (``_tracker_entry.c``; ``producer/entry.py``): one
  extension, so that a send crosses into no other but the append's;
- ``facades/confluent/_reports.c``: the confluent API's delivery reports
  (``facades/confluent/reports.py``).

An extension reaches the ones below it through their capsules (``_append.h``,
``_tracker.h``), never by linking, so they depend one way, as the Python packages do.

It runs for wheels and editable installs alike. The compiler is ``$CC`` if set, else the
one Python was built with. If it is missing or fails, the build still succeeds, as a
pure-Python wheel (``py3-none-any``), and shmkafka uses its pure-Python path (same
behaviour, slower sends; the first producer logs it once). ``SHMKAFKA_PURE_WHEEL=1`` builds
that wheel on purpose (``make dist`` ships one beside the manylinux wheel).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sysconfig
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

# (the extension, its sources, the folders of the other extensions' headers it includes),
# lowest layer first
EXTENSIONS = (
    (
        "pool/shmkafka/pool/_append",
        (
            "_append.c",
            "_append_setup.c",
            "_append_locks.c",
            "_append_write.c",
            "_append_drain.c",
            "_append_post.c",
            "_append_seal.c",
            "_append_lz4.c",
            "_append_finish.c",
        ),
        (),
    ),
    (
        "producer/shmkafka/producer/_tracker",
        (
            "_tracker.c",
            "_tracker_futures.c",
            "_tracker_complete.c",
            "_tracker_entry.c",
            "_tracker_entry_switch.c",
        ),
        ("pool/shmkafka/pool",),
    ),
    (
        "facades/shmkafka/facades/confluent/_reports",
        ("_reports.c",),
        ("producer/shmkafka/producer", "pool/shmkafka/pool"),
    ),
)


class CustomBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return  # (the sdist carries the C sources, not objects)
        if os.environ.get("SHMKAFKA_PURE_WHEEL"):
            self.app.display_info("shmkafka: SHMKAFKA_PURE_WHEEL is set: a pure-Python wheel")
            return
        suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
        compiler = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
        include = sysconfig.get_paths()["include"]
        built = []
        for extension, sources, headers in EXTENSIONS:
            path = os.path.join(self.root, extension)
            target = path + suffix
            folder = os.path.dirname(path)
            command = [
                *compiler,
                "-shared",
                "-fPIC",
                "-O2",
                "-Wall",
                "-fvisibility=hidden",  # (only PyInit_ is exported: the parts link inside)
                f"-I{include}",
                *(f"-I{os.path.join(self.root, other)}" for other in headers),
                *(os.path.join(folder, source) for source in sources),
                "-o",
                target,
                "-ldl",  # (_append_seal.c's dlopen: in libc from glibc 2.34, libdl before)
            ]
            try:
                subprocess.run(command, check=True, capture_output=True, text=True)
            except (OSError, subprocess.CalledProcessError) as exc:
                detail = getattr(exc, "stderr", "") or str(exc)
                self.app.display_warning(
                    f"shmkafka: C extensions not built, using pure Python: {detail}"
                )
                return
            built.append(os.path.relpath(target, self.root))
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        build_data["artifacts"].extend(built)
