"""Build hook: compile the C fast path (producer/.../_fastappend.c: the append; _tracker.c: the
futures of a send; _reports.c: the confluent API's delivery reports; _entry.c: send() and
produce() for the common record) in place, as one extension module.

It runs for wheels and editable installs alike. If no C compiler is available the build
still succeeds and shmkafka uses its pure-Python path (same behaviour, slower appends).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sysconfig
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCES = tuple(
    f"producer/shmkafka/producer/{name}.c"
    for name in ("_fastappend", "_tracker", "_reports", "_entry")
)


class CustomBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
        sources = [os.path.join(self.root, source) for source in SOURCES]
        target = sources[0][: -len(".c")] + suffix
        compiler = shlex.split(sysconfig.get_config_var("CC") or "cc")
        include = sysconfig.get_paths()["include"]
        command = [
            *compiler,
            "-shared",
            "-fPIC",
            "-O2",
            "-Wall",
            f"-I{include}",
            *sources,
            "-o",
            target,
        ]
        try:
            subprocess.run(command, check=True, capture_output=True, text=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            detail = getattr(exc, "stderr", "") or str(exc)
            self.app.display_warning(
                f"shmkafka: C fast path not built, using pure Python: {detail}"
            )
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        build_data["artifacts"].append(os.path.relpath(target, self.root))
