"""Print the declared minimum version of every direct dependency (and of the extras named on the command line) as
pip constraints, `name==floor`: installing with them tests that the floors in pyproject.toml are true.

    python .ci/floors.py test > floors.txt && pip install -c floors.txt -e ".[test]"
"""

import sys
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
requirements = list(project["dependencies"])
for extra in sys.argv[1:]:
    requirements += project["optional-dependencies"][extra]
floors = {}
for line in requirements:
    requirement = Requirement(line)
    lowest = [s.version for s in requirement.specifier if s.operator in (">=", "==")]
    if requirement.name != "blockpilot-hf" and lowest:
        floors[requirement.name] = lowest[0]
print("\n".join(f"{name}=={version}" for name, version in floors.items()))
