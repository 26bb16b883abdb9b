"""The C extension rtrain._rtrain for pip (pyproject.toml has the rest).

The CMake build makes the same module from the same source
(client/python/CMakeLists.txt, with librtrain linked statically); here it
links the shared librtrain that pkg-config finds as "rtrain": the rtrain
package's (/usr/lib/<arch>/pkgconfig/rtrain.pc) or a build tree's
(PKG_CONFIG_PATH=<build>/pkgconfig finds rtrain-uninstalled.pc, which also
sets a run path to <build>/client/lib). The version is librtrain's."""
import os
import shlex
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


def pkg_config(*args):
    try:
        r = subprocess.run(["pkg-config", *args, "rtrain"], capture_output=True,
                           text=True)
    except FileNotFoundError:
        raise SystemExit("rtrain: pkg-config is not installed (apt-get install "
                         "pkg-config)")
    if r.returncode != 0:
        raise SystemExit(
            "rtrain: pkg-config finds no librtrain (%s). Install the rtrain "
            ".deb (docs/packages.md), or build rtrain with CMake and set "
            "PKG_CONFIG_PATH=<build>/pkgconfig" % r.stderr.strip())
    return r.stdout.strip()


VERSION = pkg_config("--modversion")


class BuildExt(build_ext):
    """Writes rt_version.h (what the CMake build configures from
    common/rt_version.h.in) with librtrain's version, and finds numpy's
    headers at build time."""

    def run(self):
        import numpy
        inc = os.path.join(os.path.abspath(self.build_temp), "rt_gen")
        os.makedirs(inc, exist_ok=True)
        major, minor, patch = (VERSION.split(".") + ["0", "0"])[:3]
        with open(os.path.join(inc, "rt_version.h"), "w") as f:
            f.write("#ifndef RTRAIN_VERSION_H\n#define RTRAIN_VERSION_H\n"
                    "#define RT_VERSION_MAJOR %s\n#define RT_VERSION_MINOR %s\n"
                    "#define RT_VERSION_PATCH %s\n#define RT_VERSION_STRING \"%s\"\n"
                    "#endif\n" % (major, minor, patch, VERSION))
        for e in self.extensions:
            e.include_dirs += [inc, numpy.get_include()]
        super().run()


setup(
    version=VERSION,
    ext_modules=[Extension(
        "rtrain._rtrain", ["src/rtrain_module.c"],
        # rt_progress.h: librtrain's progress display, shared with the CLI
        include_dirs=[os.path.join(HERE, "..", "lib")],
        extra_compile_args=shlex.split(pkg_config("--cflags")) + ["-D_GNU_SOURCE"],
        extra_link_args=shlex.split(pkg_config("--libs")))],
    cmdclass={"build_ext": BuildExt},
)
