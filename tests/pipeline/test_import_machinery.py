"""The monitor's judgement of which module code the import system itself made.

Once code of the patch's has run, the monitor lets code claiming a file the patch
did not write run only where it surely is that file's; a module imported by the
import system's own loaders, all of whose code is as it was, is (`Machinery`).
Here the monitor's module is run in a fresh interpreter of each version found on
this host, an audit hook asks `Machinery.imports` about every module body as it
is executed, and the answers are printed: a module from a source file, from
bytecode only and from a zip archive are the import system's; the same module
once the loader class was changed, once a loader of the caller's made its code,
and code run by hand under a file's name are not.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jouled.errors import ConfigError
from jouled.pipeline.runners import MONITOR
from jouled.swebench_pythons import find

SCRIPT = r"""
import importlib, importlib.machinery, importlib.util, json, os, py_compile
import sys, tempfile, zipfile

namespace = {"__name__": "__jouled__"}
for path in sys.argv[1:]:  # the monitor's files, run into one namespace as the boot code does
    exec(compile(open(path).read(), path, "exec"), namespace)
machinery = namespace["Machinery"]()
answers = {}

def hook(event, args):
    code = args[0] if args else None
    if event == "exec" and type(code).__name__ == "code" and code.co_name == "<module>":
        name = os.path.basename(code.co_filename)
        if name.startswith("jbm_"):
            answers[name] = machinery.imports(sys._getframe(1), code)

sys.addaudithook(hook)
home = tempfile.mkdtemp()
sys.path.insert(0, home)
sys.dont_write_bytecode = True

def write(name, text="X = 1\n"):
    with open(os.path.join(home, name), "w") as out:
        out.write(text)

write("jbm_source.py")
import jbm_source

write("jbm_compiled_src.py")
source = os.path.join(home, "jbm_compiled_src.py")
py_compile.compile(source, cfile=os.path.join(home, "jbm_bytecode.pyc"))
import jbm_bytecode  # a bytecode file alone: its code names the file it was compiled from

with zipfile.ZipFile(os.path.join(home, "lib.zip"), "w") as archive:
    archive.writestr("jbm_zipped.py", "X = 1\n")
sys.path.insert(0, os.path.join(home, "lib.zip"))
import jbm_zipped

write("jbm_by_hand.py")
exec(compile("X = 2\n", os.path.join(home, "jbm_by_hand.py"), "exec"), {})

write("jbm_own_loader.py")
class Loader(importlib.machinery.SourceFileLoader):
    def get_code(self, fullname):
        return compile("X = 3\n", self.path, "exec")
path = os.path.join(home, "jbm_own_loader.py")
spec = importlib.util.spec_from_loader("jbm_own_loader", Loader("jbm_own_loader", path))
spec.loader.exec_module(importlib.util.module_from_spec(spec))

write("jbm_changed_class.py")
loader = importlib.machinery.SourceFileLoader
original = loader.source_to_code
loader.source_to_code = lambda self, data, path: original(self, data, path)
import jbm_changed_class
del loader.source_to_code  # inherited, as it was

write("jbm_restored.py")
import jbm_restored
print(json.dumps(answers))
"""

EXPECTED = {
    "jbm_source.py": True,
    "jbm_compiled_src.py": True,  # the bytecode file's code names its source
    "jbm_zipped.py": True,
    "jbm_by_hand.py": False,
    "jbm_own_loader.py": False,
    "jbm_changed_class.py": False,
    "jbm_restored.py": True,
}


def _pythons() -> list[str]:
    found = {f"{sys.version_info[0]}.{sys.version_info[1]}": sys.executable}
    for version in ("3.8", "3.9", "3.12", "3.13"):
        try:
            found.setdefault(version, find(version))
        except ConfigError:
            continue
    return sorted(found.values())


@pytest.mark.parametrize("python", _pythons())
def test_module_code_is_the_import_system_s_only_as_it_was(python: str, tmp_path: Path) -> None:
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [python, "-I", str(script), *map(str, MONITOR)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == EXPECTED
