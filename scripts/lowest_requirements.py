"""Prints a pip requirements list pinning each dependency pyproject.toml declares (the core ones and the extras
named on the command line) to the lowest version it declares: ``name>=X`` becomes ``name==X``, markers kept.
scripts/lowest.sh installs it, so that every lower bound we declare is one a test run has had."""

import re
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    raise SystemExit("lowest_requirements.py needs Python 3.11 or later (tomllib)") from None

PROJECT = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
LOWER_BOUND = re.compile(r"^(?P<name>[A-Za-z0-9_.\[\],-]+)\s*>=\s*(?P<version>[^,;\s]+)\s*(?P<marker>;.*)?$")


def lowest(requirement: str) -> str:
    match = LOWER_BOUND.match(requirement.strip())
    if match is None:
        raise SystemExit(f"lowest_requirements.py: {requirement!r} has no single lower bound (name>=X) to pin")
    return f"{match['name']}=={match['version']}{match['marker'] or ''}"


def main(extras: list[str]) -> None:
    unknown = set(extras) - set(PROJECT["optional-dependencies"])
    if unknown:
        raise SystemExit(f"lowest_requirements.py: no extra named {', '.join(sorted(unknown))}")
    requirements = [*PROJECT["dependencies"], *(r for e in extras for r in PROJECT["optional-dependencies"][e])]
    print("\n".join(lowest(requirement) for requirement in requirements))


if __name__ == "__main__":
    main(sys.argv[1:])
