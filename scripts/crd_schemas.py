"""Cut a CustomResourceDefinition down to the JSON schema the deploy tests validate against.

    python3 scripts/crd_schemas.py SOURCE COMMIT CRD.yaml... > tests/fixtures/crd-schemas/X.json

For the stored (and served) version of each CRD: its ``openAPIV3Schema`` without the
``description`` texts (most of the bytes), strict the way kubeconform's ``-strict`` is (an
object that lists its ``properties`` and does not preserve unknown fields refuses other
keys, so a misspelt field fails), with ``apiVersion``/``kind`` pinned. The output names its
source repository, commit and files, so a schema can be refreshed from a newer release the
same way.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def strip(node: Any) -> Any:
    if isinstance(node, list):
        return [strip(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: strip(v) for k, v in node.items() if k != "description"}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def schemas(crd: dict[str, Any]) -> dict[str, Any]:
    group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
    out = {}
    for version in crd["spec"]["versions"]:
        if not (version.get("served") and version.get("storage")):
            continue
        schema = strip(version["schema"]["openAPIV3Schema"])
        schema["properties"]["apiVersion"] = {"const": f"{group}/{version['name']}"}
        schema["properties"]["kind"] = {"const": kind}
        schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind"})
        out[f"{group}/{version['name']}/{kind}"] = schema
    return out


def main(argv: list[str]) -> None:
    import yaml

    source, commit, *paths = argv
    found: dict[str, Any] = {}
    for path in paths:
        found.update(schemas(yaml.safe_load(Path(path).read_text())))
    names = ", ".join(Path(p).name for p in paths)
    note = f"{source} at {commit}: {names}, descriptions removed (scripts/crd_schemas.py)"
    doc = {"$comment": note, "schemas": found}
    json.dump(doc, sys.stdout, indent=None, separators=(",", ":"), sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
