"""sparsek's PEP 517 build backend: maturin's, except that it does not download Rust behind the user's back.

Without `cargo` on the PATH, maturin's backend installs a Rust toolchain (about 700 MB) into a temporary directory
and builds with it, silently under pip. This wrapper stops with a message saying what is missing instead, unless
SPARSEK_INSTALL_RUST=1 asks for maturin's download. Every hook is maturin's own, called unchanged.
"""

from __future__ import annotations

import os
import shutil

import maturin

_MESSAGE = """\
sparsek: building the package from source needs Rust (stable) and `cargo` on the PATH, which was not found.
  - Install Rust from https://rustup.rs (nothing from CUDA is needed), then rerun this command; or
  - set SPARSEK_INSTALL_RUST=1 to let maturin download a temporary Rust toolchain (about 700 MB) for this build.
Prebuilt wheels (manylinux_2_28, x86_64, CPython >= 3.10) need neither."""


def _check_rust() -> None:
    if shutil.which("cargo") is None and os.environ.get("SPARSEK_INSTALL_RUST") != "1":
        raise SystemExit(_MESSAGE)


def _wrap(name: str):
    hook = getattr(maturin, name)

    def wrapped(*args, **kwargs):
        _check_rust()
        return hook(*args, **kwargs)

    wrapped.__name__ = name
    wrapped.__doc__ = hook.__doc__
    return wrapped


# The hooks this maturin has (PEP 517 and PEP 660), each checked first.
_HOOKS = [
    "build_wheel",
    "build_sdist",
    "build_editable",
    "get_requires_for_build_wheel",
    "get_requires_for_build_sdist",
    "get_requires_for_build_editable",
    "prepare_metadata_for_build_wheel",
    "prepare_metadata_for_build_editable",
]
for _name in _HOOKS:
    if hasattr(maturin, _name):
        globals()[_name] = _wrap(_name)
