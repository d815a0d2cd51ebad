"""Write raycluster-v1.schema.json: the RayCluster (ray.io/v1) schema of a KubeRay CRD, pruned.

KubeRay's CRD (ray-operator/config/crd/bases/ray.io_rayclusters.yaml, ~900 KB) inlines a whole
PodTemplateSpec for the head and for each worker group. This keeps the RayCluster's own fields
and replaces each pod template (and the head Service and network policy it also inlines) by an
object that tests/unit/test_deploy_manifests.py checks against Kubernetes' own PodTemplateSpec
schema (kubernetes-validate). Every object with listed properties gets additionalProperties:
false, as `kubectl apply --validate=strict` would refuse a misspelt field the API server would
otherwise drop.

    python3 deploy/schemas/extract_raycluster_schema.py ray.io_rayclusters.yaml v1.7.0 > deploy/schemas/raycluster-v1.schema.json
"""

from __future__ import annotations

import json
import sys
from typing import Any

import yaml

INLINED = {"template": "a PodTemplateSpec", "headService": "a Service", "networkPolicy": "a network policy"}


def strict(node: Any) -> Any:
    if isinstance(node, dict):
        out = {k: strict(v) for k, v in node.items()}
        if "properties" in out and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [strict(v) for v in node]
    return node


def prune(node: Any) -> Any:
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "properties" and isinstance(v, dict):
                out[k] = {name: ({"type": "object", "$comment": f"{INLINED[name]}, checked on its own"}
                                 if name in INLINED else prune(sub)) for name, sub in v.items()}
            else:
                out[k] = prune(v)
        return out
    if isinstance(node, list):
        return [prune(v) for v in node]
    return node


def main(path: str, release: str) -> None:
    with open(path) as f:
        crd = yaml.safe_load(f)
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    schema = dict(version["schema"]["openAPIV3Schema"])
    schema["properties"] = {k: v for k, v in schema["properties"].items() if k != "status"}
    out = {"$comment": f"KubeRay {release}, {crd['metadata']['name']} v1 (ray-project/kuberay, "
                       "ray-operator/config/crd/bases/ray.io_rayclusters.yaml), pruned by extract_raycluster_schema.py",
           **strict(prune(schema))}
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
