"""The CustomResourceDefinitions the generated Kubernetes objects are checked against (tests/golden/k8s/crd, copies
of ../shared/schemas), as jsonschema validators that refuse unknown fields the way the API server does under
``kubectl apply``'s default strict field validation (a CRD's structural schema would otherwise prune them silently)."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import yaml

REPO = Path(__file__).resolve().parents[1]
CRD_DIR = REPO / "tests" / "golden" / "k8s" / "crd"
SHARED = REPO.parent / "shared" / "schemas"  # the reference copies, where this checkout has them
TFJOB_CRD = "kubeflow.org_tfjobs.crd.yaml"
JOBSET_CRD = "jobset.x-k8s.io_jobsets.crd.yaml"


def _strict(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: false`` wherever an object lists its properties and neither allows
    other keys nor preserves unknown fields."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _strict(value) for key, value in schema.items()}
    if "properties" in out and "additionalProperties" not in out \
            and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def validator(file_name: str, version: str) -> jsonschema.Draft7Validator:
    """The ``openAPIV3Schema`` of API version ``version`` in ``file_name``, made strict (see the module)."""
    text = (CRD_DIR / file_name).read_text()
    shared = SHARED / file_name
    if shared.exists():
        assert shared.read_text() == text, f"tests/golden/k8s/crd/{file_name} is out of date with ../shared/schemas"
    crd = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # large: the C loader is 20x faster
    (found,) = [entry for entry in crd["spec"]["versions"] if entry["name"] == version]
    schema = copy.deepcopy(found["schema"]["openAPIV3Schema"])
    return jsonschema.Draft7Validator(_strict(schema))
