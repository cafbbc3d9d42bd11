"""tools/build.sh, the build step of tools/gradsweep and tools/test: before a first build (no build.ninja in the
folder) it says on stderr that it configures and builds and where its log is (a first build runs for minutes and
printed nothing); with the folder configured and nothing to do it prints nothing. cmake and ninja are stand-ins on
PATH that only create the files a configure leaves, so this runs in a moment."""
import os
import stat
import subprocess

from tools_test_paths import REPO_ROOT


def stand_ins(bin_dir):
    bin_dir.mkdir()
    scripts = {
        "cmake": '#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = -B ] && b=$2; shift; done\n'
                 'touch "$b/build.ninja"; echo "GRADSWEEP_WERROR:BOOL=OFF" > "$b/CMakeCache.txt"\n',
        "ninja": "#!/bin/sh\nexit 0\n",
        "nproc": "#!/bin/sh\necho 2\n",
    }
    for name, text in scripts.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)


def build(tmp_path, folder):
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "GRADSWEEP_BUILD_DIR")}
    env["PATH"] = f"{tmp_path / 'bin'}:{env.get('PATH', '')}"
    env["GRADSWEEP_BUILD_DIR"] = str(folder)
    return subprocess.run([str(REPO_ROOT / "tools" / "build.sh"), "gradsweep"], capture_output=True, text=True,
                          env=env, timeout=60)


def test_a_first_build_says_so_and_a_build_with_nothing_to_do_is_silent(tmp_path):
    stand_ins(tmp_path / "bin")
    folder = tmp_path / "build"
    first = build(tmp_path, folder)
    assert first.returncode == 0, first.stderr
    assert first.stderr == (f"build: configuring and building in {folder} (a first build takes minutes; "
                            f"log: {folder}/build.log)\n"), first.stderr
    again = build(tmp_path, folder)
    assert again.returncode == 0 and again.stderr == "" and again.stdout == "", again
