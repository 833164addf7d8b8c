#!/usr/bin/python3
# Schema check of Kubernetes manifests against the API's own types, offline: Debian's
# python3-kubernetes carries a model class per API type, generated from Kubernetes' OpenAPI
# specification (1.22 in bookworm), each with its fields' JSON names and types. Every key of a
# manifest must be a field of its type (a misspelt or misplaced key is refused, not ignored), every
# value of the field's type, and the fields the API requires present. autoscaling/v2 came after
# 1.22: its HorizontalPodAutoscaler is checked against v2beta2, which v2 took over unchanged.
# Usage: check_k8s_schema.py FILE|DIR...     prints "ok ..."/"FAIL ..." lines; exit 1 on a failure
import glob
import os
import re
import sys

import yaml
from kubernetes.client import models

MODEL = {("apps/v1", "Deployment"): "V1Deployment", ("v1", "Service"): "V1Service",
         ("v1", "ConfigMap"): "V1ConfigMap", ("policy/v1", "PodDisruptionBudget"): "V1PodDisruptionBudget",
         ("autoscaling/v2", "HorizontalPodAutoscaler"): "V2beta2HorizontalPodAutoscaler"}
SCALAR = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,), "datetime": (str,), "date": (str,)}


def check_value(v, t, path, errs):
    """Appends to errs every way v is not of the model type t (a name from openapi_types)."""
    if t == "object":  # int-or-string (ports) and free-form fields: the generator gives no type
        if not isinstance(v, (str, int, dict, list)) or isinstance(v, bool):
            errs.append(f"{path}: {v!r} is not a string, number or object")
        return
    if t in SCALAR:
        if not isinstance(v, SCALAR[t]) or (t != "bool" and isinstance(v, bool)):
            errs.append(f"{path}: {v!r} is not {'a' if t != 'int' else 'an'} {t}")
        return
    m = re.fullmatch(r"list\[(.+)\]", t)
    if m:
        if not isinstance(v, list):
            errs.append(f"{path}: want a list of {m.group(1)}, got {type(v).__name__}")
            return
        for i, x in enumerate(v):
            check_value(x, m.group(1), f"{path}[{i}]", errs)
        return
    m = re.fullmatch(r"dict\(str, (.+)\)", t)
    if m:
        if not isinstance(v, dict):
            errs.append(f"{path}: want a map of {m.group(1)}, got {type(v).__name__}")
            return
        for k, x in v.items():
            if not isinstance(k, str):
                errs.append(f"{path}: key {k!r} is not a string")
            check_value(x, m.group(1), f"{path}.{k}", errs)
        return
    cls = getattr(models, t, None)
    if cls is None:
        errs.append(f"{path}: type {t} unknown to python3-kubernetes")
        return
    if not isinstance(v, dict):
        errs.append(f"{path}: want an object ({t}), got {type(v).__name__} {v!r}")
        return
    by_json = {j: a for a, j in cls.attribute_map.items()}
    for k, x in v.items():
        if k not in by_json:
            errs.append(f"{path}: unknown field {k!r} in {t} (fields: {', '.join(sorted(by_json))})")
        elif x is not None:
            check_value(x, cls.openapi_types[by_json[k]], f"{path}.{k}", errs)
    # the model's constructor refuses a required field left out (and some fields' values): given
    # the scalars as they are and a stand-in for each nested value, only those checks can fail
    kw = {by_json[k]: (x if not isinstance(x, (dict, list)) else object()) for k, x in v.items() if k in by_json}
    try:
        cls(**kw)
    except ValueError as e:
        errs.append(f"{path} ({t}): {e}")


def check_doc(d):
    if not isinstance(d, dict):
        return [f"not an object: {d!r}"[:200]]
    key = (d.get("apiVersion"), d.get("kind"))
    if key not in MODEL:
        return [f"apiVersion {key[0]!r} kind {key[1]!r}: not one of {sorted(MODEL)}"]
    errs = []
    check_value(d, MODEL[key], d["kind"], errs)
    return errs


def main():
    files = []
    for a in sys.argv[1:]:
        files += sorted(glob.glob(f"{a}/**/*.yaml", recursive=True)) if os.path.isdir(a) else [a]
    if not files:
        sys.exit("check_k8s_schema.py: no manifest given")
    fails = 0
    for f in files:
        try:
            docs = [d for d in yaml.safe_load_all(open(f)) if d is not None]
        except (OSError, yaml.YAMLError) as e:
            print(f"FAIL {f}: {e}")
            fails += 1
            continue
        for d in docs:
            errs = check_doc(d)
            name = f"{f}: {d.get('kind') if isinstance(d, dict) else '?'} " \
                   f"{(d.get('metadata') or {}).get('name') if isinstance(d, dict) else ''}"
            print(("ok   " if not errs else "FAIL ") + name + "".join(f"\n  {e}" for e in errs[:10]))
            fails += bool(errs)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
