"""A PEP 517 build backend for the dshd client, standard library only.

The client needs nothing beyond Python's standard library, and so does its
build: ``pip install ./clients/python`` asks no package index for a build
backend (setuptools, wheel, ...), so it works on a machine without one.
pyproject.toml names this module with ``backend-path``; its ``[project]``
table is the one source of the package's metadata.
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "dshd"
# A fixed time inside archives, so a build is byte for byte repeatable.
EPOCH = (2020, 1, 1, 0, 0, 0)


def _project():
    """The [project] table of pyproject.toml (name, version, description,
    requires-python, readme). tomllib is Python 3.11+; older versions get
    a reader for the plain ``key = "value"`` lines this file uses."""
    path = os.path.join(ROOT, "pyproject.toml")
    try:
        import tomllib
    except ImportError:
        tomllib = None
    if tomllib is not None:
        with open(path, "rb") as f:
            return tomllib.load(f)["project"]
    project, table = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("["):
                table = line.strip("[]").strip()
                continue
            m = re.match(r'^([A-Za-z0-9_-]+)\s*=\s*"(.*)"$', line)
            if table == "project" and m:
                project[m.group(1)] = m.group(2).replace('\\"', '"')
    return project


def _dist_name(project):
    return re.sub(r"[-_.]+", "_", project["name"]).lower()


def _metadata(project):
    lines = [
        "Metadata-Version: 2.1",
        "Name: " + project["name"],
        "Version: " + project["version"],
        "Summary: " + project.get("description", ""),
    ]
    if project.get("requires-python"):
        lines.append("Requires-Python: " + project["requires-python"])
    text = "\n".join(lines) + "\n"
    readme = project.get("readme")
    if readme:
        with open(os.path.join(ROOT, readme), encoding="utf-8") as f:
            text += "Description-Content-Type: text/markdown\n\n" + f.read()
    return text


def _wheel_file():
    return "Wheel-Version: 1.0\nGenerator: dshd-build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _package_files():
    """(path in the archive, path on disk) of every file of the package."""
    out = []
    base = os.path.join(ROOT, PACKAGE)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith((".pyc", ".pyo")):
                continue
            full = os.path.join(dirpath, name)
            out.append((os.path.relpath(full, ROOT).replace(os.sep, "/"), full))
    return out


def _write_wheel(wheel_directory, files):
    """Writes a wheel of files ({archive path: bytes}) and returns its name."""
    project = _project()
    dist = _dist_name(project)
    info = "%s-%s.dist-info" % (dist, project["version"])
    files = dict(files)
    files[info + "/METADATA"] = _metadata(project).encode("utf-8")
    files[info + "/WHEEL"] = _wheel_file().encode("utf-8")
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
        record.append("%s,sha256=%s,%d" % (path, digest, len(data)))
    record.append(info + "/RECORD,,")
    files[info + "/RECORD"] = ("\n".join(record) + "\n").encode("utf-8")
    name = "%s-%s-py3-none-any.whl" % (dist, project["version"])
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            zi = zipfile.ZipInfo(path, EPOCH)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    project = _project()
    info = "%s-%s.dist-info" % (_dist_name(project), project["version"])
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    with open(os.path.join(metadata_directory, info, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata(project))
    with open(os.path.join(metadata_directory, info, "WHEEL"), "w", encoding="utf-8") as f:
        f.write(_wheel_file())
    return info


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = {}
    for arc, full in _package_files():
        with open(full, "rb") as f:
            files[arc] = f.read()
    return _write_wheel(wheel_directory, files)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """PEP 660: a wheel whose .pth file puts the source tree on sys.path."""
    return _write_wheel(wheel_directory, {"_dshd_editable.pth": (ROOT + "\n").encode("utf-8")})


def build_sdist(sdist_directory, config_settings=None):
    project = _project()
    base = "%s-%s" % (_dist_name(project), project["version"])
    name = base + ".tar.gz"
    paths = ["pyproject.toml", "README.md", "_build/backend.py"] + [arc for arc, _ in _package_files()]

    def add(tar, arc, data):
        ti = tarfile.TarInfo(base + "/" + arc)
        ti.size, ti.mode, ti.mtime = len(data), 0o644, 1577836800
        tar.addfile(ti, io.BytesIO(data))

    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for arc in paths:
            with open(os.path.join(ROOT, arc), "rb") as f:
                add(tar, arc, f.read())
        add(tar, "PKG-INFO", _metadata(project).encode("utf-8"))
    return name
