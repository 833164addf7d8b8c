#!/usr/bin/python3
# Static checks of deploy/k8s/ (no cluster here, and `kubectl --dry-run=client` needs one: it asks
# the API server how to map each kind): every document parses (python3-yaml), has the apiVersion
# of its kind, and the manifests agree with each other, with the image and with the server: the
# selectors, the port, the probes on /health, the grace period against preStop + the drain, the
# memory against docs/deploy.md's formula, the metric names against src/server/metrics.c.
# Usage: check_k8s.py SOURCE_DIR      prints "ok ..."/"FAIL ..." lines; exit 1 on a failure
import glob
import math
import os
import re
import sys

import yaml

SRC = sys.argv[1]
fails = 0


def check(name, cond, detail=""):
    global fails
    print(("ok   " if cond else "FAIL ") + name + ("" if cond or not detail else f"\n  {detail}"))
    fails += not cond


API = {"Deployment": "apps/v1", "Service": "v1", "PodDisruptionBudget": "policy/v1",
       "HorizontalPodAutoscaler": "autoscaling/v2", "ConfigMap": "v1"}
docs = {}
for f in sorted(glob.glob(f"{SRC}/deploy/k8s/*.yaml") + glob.glob(f"{SRC}/deploy/k8s/optional/*.yaml")):
    rel = os.path.relpath(f, SRC)
    try:
        ds = [d for d in yaml.safe_load_all(open(f)) if d is not None]
    except yaml.YAMLError as e:
        check(f"{rel} parses", False, str(e))
        continue
    for d in ds:
        k = d.get("kind")
        check(f"{rel}: {k} {d.get('metadata', {}).get('name')} ({d.get('apiVersion')})",
              k in API and d.get("apiVersion") == API[k] and d.get("metadata", {}).get("name"),
              f"want apiVersion {API.get(k)} and a metadata.name")
        docs[k] = d
for k in ("Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler"):
    check(f"a {k}", k in docs)
if fails:
    sys.exit(1)

dep, svc, pdb, hpa = docs["Deployment"], docs["Service"], docs["PodDisruptionBudget"], docs["HorizontalPodAutoscaler"]
pod = dep["spec"]["template"]
labels = pod["metadata"]["labels"]
sel = dep["spec"]["selector"]["matchLabels"]
sub = lambda a, b: all(b.get(k) == v for k, v in a.items())  # noqa: E731
check("Deployment selector matches its pods", sel and sub(sel, labels))
check("Service selector matches the pods", svc["spec"]["selector"] and sub(svc["spec"]["selector"], labels))
check("PodDisruptionBudget selects the pods", sub(pdb["spec"]["selector"]["matchLabels"], labels)
      and pdb["spec"].get("maxUnavailable") == 1)
t = hpa["spec"]["scaleTargetRef"]
check("HPA scales the Deployment", (t["kind"], t["name"], t["apiVersion"]) == ("Deployment", dep["metadata"]["name"], "apps/v1")
      and 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"])

(c,) = pod["spec"]["containers"]
args = c["args"]


def arg(name, default=None):
    return args[args.index(name) + 1] if name in args else default


ports = {p["name"]: p["containerPort"] for p in c["ports"]}
df = open(f"{SRC}/deploy/Dockerfile").read()
check("container port 8080 (http), the image's --port", ports.get("http") == 8080 and '"--port", "8080"' in df)
sp = svc["spec"]["ports"][0]
check("Service targets the container's port", sp["targetPort"] in ("http", 8080))
check("--host and --port left to the image's entrypoint", "--host" not in args and "--port" not in args)
for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
    g = c.get(probe, {}).get("httpGet", {})
    check(f"{probe} on GET /health", g.get("path") == "/health" and g.get("port") in ("http", 8080))
st = c["startupProbe"]
check("the startup probe waits minutes for the model to load",
      st["periodSeconds"] * st["failureThreshold"] >= 300)
pre = c["lifecycle"]["preStop"]["exec"]["command"]
check("preStop sleeps (a program the runtime image has: coreutils' /bin/sleep)", pre[0] == "/bin/sleep" and pre[1].isdigit())
drain = int(arg("--shutdown-timeout", "30"))
grace = pod["spec"]["terminationGracePeriodSeconds"]
check(f"terminationGracePeriodSeconds {grace} = preStop {pre[1]} + --shutdown-timeout {drain} + 10 (the last answers)",
      grace == int(pre[1]) + drain + 10)
ann = pod["metadata"]["annotations"]
check("Prometheus scrape annotations: /metrics on 8080",
      ann.get("prometheus.io/scrape") == "true" and ann.get("prometheus.io/port") == "8080" and ann.get("prometheus.io/path") == "/metrics")
sc = pod["spec"]["securityContext"]
m = re.search(r"^USER (\d+):(\d+)$", df, re.M)
check("non-root, the image's user", sc.get("runAsNonRoot") is True and m and sc.get("runAsUser") == int(m.group(1)),
      f"Dockerfile USER {m and m.group(0)}")

# resources: docs/deploy.md's formula on the annotated inputs and the container's arguments
kv = dict(x.split("=") for x in ann["specdec.io/kv-bytes-per-position"].split(","))
fb = dict(x.split("=") for x in ann["specdec.io/model-bytes"].split(","))
half = {"f32": 1, "f16": 2}[arg("--kv-type", "f32")]
np_ = int(arg("-np", arg("--parallel", "4")))
ctx = int(arg("-c", arg("--ctx")))
buf = int(arg("--buffer-limit", "64"))
b = int(fb["target"]) + int(fb.get("draft", 0)) + np_ * ctx * (int(kv["target"]) + int(kv.get("draft", 0))) // half \
    + buf * 2**20 + 256 * 2**20
mib = math.ceil(b * 11 // 10 / 2**28) * 256
res = c["resources"]
check(f"memory {res['requests']['memory']} = the formula's {mib}Mi (requests = limits)",
      res["requests"]["memory"] == res["limits"]["memory"] == f"{mib}Mi")
check(f"cpu {res['requests']['cpu']} = the threads (-t {arg('-t')})", res["requests"]["cpu"] == res["limits"]["cpu"] == arg("-t"))
vm = {v["name"]: v for v in c["volumeMounts"]}
check("models mounted read-only at /models (the image's SPECDEC_MODEL_PATH)",
      vm.get("models", {}).get("mountPath") == "/models" and vm["models"].get("readOnly") is True
      and "ENV SPECDEC_MODEL_PATH=/models" in df)

# the metric the HPA reads exists, under the adapter rule's name
metrics_c = open(f"{SRC}/src/server/metrics.c").read()
rules = yaml.safe_load(docs["ConfigMap"]["data"]["config.yaml"])["rules"][0]
series = re.match(r"^(\S+?)\{", rules["seriesQuery"]).group(1)
check(f"the adapter's series {series} is a metric of the server", f'"{series.split(":", 1)[1]}"' in metrics_c or series in metrics_c)
check("the HPA's metric is the one the adapter serves",
      hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == rules["name"]["as"])
sys.exit(1 if fails else 0)
