"""Prints the installed versions of mia-fast's core dependencies on one line (CI prints it before the tests)."""

import importlib.metadata
import platform

CORE = ("torch", "transformers", "tokenizers", "triton", "numpy", "fastokens", "kernels")


def installed(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


print("versions: " + " ".join([f"python {platform.python_version()}", *(f"{n} {installed(n)}" for n in CORE)]))
