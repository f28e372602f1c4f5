"""A PEP 517 / PEP 660 build backend for the gpuwatch SDK, standard library only.

Why not setuptools: pip builds a pyproject.toml project in an isolated environment and
downloads the backend named in build-system.requires; on a machine without a package index
(clusters, air-gapped nodes) that fails. This backend lives in the source tree
(backend-path), needs nothing, so `pip install ./sdk/python` works offline. It writes a
pure-Python py3-none-any wheel of the gpuwatch package, an sdist, and an editable wheel (a
.pth file pointing at this tree).
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile

NAME = "gpuwatch"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUMMARY = "gpuwatch job SDK: report training steps, phases and logs to the gpuwatch node agent"
REQUIRES_PYTHON = ">=3.8"


def _version():
    with open(os.path.join(ROOT, NAME, "__init__.py"), encoding="utf-8") as f:
        m = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    return m.group(1)


def _metadata():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return (
        "Metadata-Version: 2.1\n"
        "Name: %s\n"
        "Version: %s\n"
        "Summary: %s\n"
        "Requires-Python: %s\n"
        "Classifier: Programming Language :: Python :: 3\n"
        "Classifier: Operating System :: POSIX :: Linux\n"
        "Description-Content-Type: text/markdown\n"
        "\n%s" % (NAME, _version(), SUMMARY, REQUIRES_PYTHON, readme))


def _dist_info():
    return "%s-%s.dist-info" % (NAME, _version())


def _package_files():
    out = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, NAME)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py"):
                full = os.path.join(dirpath, name)
                out.append((os.path.relpath(full, ROOT).replace(os.sep, "/"), full))
    return out


def _record_hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode("ascii")


def _write_wheel(wheel_directory, files, tag="py3-none-any"):
    """files: [(archive path, bytes)]; adds the dist-info and returns the wheel's name."""
    info = _dist_info()
    meta = [
        (info + "/METADATA", _metadata().encode("utf-8")),
        (info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: gpuwatch_build\nRoot-Is-Purelib: true\n"
                           "Tag: %s\n" % tag).encode("ascii")),
        (info + "/top_level.txt", (NAME + "\n").encode("ascii")),
    ]
    entries = files + meta
    record = "".join("%s,%s,%d\n" % (path, _record_hash(data), len(data)) for path, data in entries)
    record += info + "/RECORD,,\n"
    entries.append((info + "/RECORD", record.encode("utf-8")))
    filename = "%s-%s-%s.whl" % (NAME, _version(), tag)
    epoch = time.mktime((2020, 1, 1, 0, 0, 0, 0, 0, -1))  # reproducible timestamps
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in entries:
            zi = zipfile.ZipInfo(path, time.localtime(epoch)[:6])
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, data)
    return filename


def _read(path):
    with open(path, "rb") as f:
        return f.read()


# -- PEP 517 -----------------------------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    info = _dist_info()
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    with open(os.path.join(metadata_directory, info, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    return info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [(arc, _read(full)) for arc, full in _package_files()])


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # Not ROOT itself on sys.path: that would also make tests/ and _build/ importable (and
    # shadow a project's own `tests`). A .pth line starting with "import" runs: it adds a
    # finder that knows only the gpuwatch package in this tree.
    # (site runs the line with exec() in a function: the lambda may use no names of its own.)
    pth = ("import sys; sys.meta_path.append(type('GpuwatchEditable', (), {'find_spec': "
           "staticmethod(lambda n, p=None, t=None: __import__('importlib.machinery', "
           "fromlist=['PathFinder']).PathFinder.find_spec(n, [%r]) if n == %r else None)})())\n"
           % (ROOT, NAME)).encode("utf-8")
    return _write_wheel(wheel_directory, [("__editable__.%s.pth" % NAME, pth)])


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, _version())
    filename = base + ".tar.gz"
    paths = ["pyproject.toml", "README.md", "_build/gpuwatch_build.py"]
    paths += [arc for arc, _ in _package_files()]
    tests = os.path.join(ROOT, "tests")
    if os.path.isdir(tests):
        paths += sorted("tests/" + n for n in os.listdir(tests) if n.endswith(".py"))
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as tf:
        pkg_info = _metadata().encode("utf-8")
        ti = tarfile.TarInfo(base + "/PKG-INFO")
        ti.size = len(pkg_info)
        ti.mode = 0o644
        tf.addfile(ti, io.BytesIO(pkg_info))
        for rel in paths:
            data = _read(os.path.join(ROOT, rel))
            ti = tarfile.TarInfo(base + "/" + rel)
            ti.size = len(data)
            ti.mode = 0o644
            tf.addfile(ti, io.BytesIO(data))
    return filename
