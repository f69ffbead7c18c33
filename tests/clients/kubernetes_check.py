"""The official Kubernetes Python client against Tandem's Kubernetes API (run by
crates/tandem/tests/kubernetes.rs): typed reads of every kind served, DynamicClient discovery,
errors as metav1.Status, and every object returned checked by kubernetes-validate (1.37,
strict). Prints one `ok ...` line per check; exits non-zero at the first failure.

    python kubernetes_check.py KUBECONFIG ARRAY_JOB_ID SERVICE SBATCH
"""

import json
import os
import ssl
import subprocess
import sys
import time
import urllib.request

import kubernetes_validate
from kubernetes import client, config, dynamic, watch
from kubernetes.stream import stream

kubeconfig, array_id, service, sbatch = sys.argv[1:5]
config.load_kube_config(kubeconfig)
api = client.ApiClient()
core, apps, batch = client.CoreV1Api(api), client.AppsV1Api(api), client.BatchV1Api(api)


def check(cond, what):
    if not cond:
        print("FAILED", what)
        sys.exit(1)


def raw(path):
    """GET path as JSON, with the client's own credentials and TLS settings."""
    method, url, headers, body, post = api.param_serialize(
        "GET", path, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"]
    )
    r = api.call_api(method, url, header_params=headers, body=body, post_params=post)
    r.read()
    check(r.status == 200, f"GET {path}: {r.status} {r.data[:300]}")
    return json.loads(r.data)


# Every object of every kind, read raw (no client model in between), validated strictly.
counts = {}
for path, kind in [
    ("/api/v1/nodes", "Node"),
    ("/api/v1/namespaces", "Namespace"),
    ("/api/v1/namespaces/default/pods", "Pod"),
    ("/api/v1/namespaces/default/events", "Event"),
    ("/apis/apps/v1/namespaces/default/deployments", "Deployment"),
    ("/apis/apps/v1/namespaces/default/replicasets", "ReplicaSet"),
    ("/apis/batch/v1/namespaces/default/jobs", "Job"),
]:
    lst = raw(path)
    check(lst["kind"] == kind + "List", f"{path}: kind {lst['kind']}")
    check(lst["metadata"].get("resourceVersion"), f"{path}: the list has no resourceVersion")
    for obj in lst["items"]:
        kubernetes_validate.validate(obj, "1.37.0", strict=True)
        check(obj["metadata"].get("resourceVersion"), f"{path}: {obj['metadata']['name']} has no resourceVersion")
        one = raw(f"{path}/{obj['metadata']['name']}")
        kubernetes_validate.validate(one, "1.37.0", strict=True)
    counts[kind] = len(lst["items"])
print("ok validated", json.dumps(counts, sort_keys=True))

# Typed reads.
nodes = core.list_node().items
check({n.metadata.name for n in nodes} >= {"node1", "node2"}, f"nodes: {[n.metadata.name for n in nodes]}")
check(all(n.status.capacity["cpu"] for n in nodes), "node capacity")
print("ok nodes", len(nodes))
pods = core.list_namespaced_pod("default", label_selector=f"batch.kubernetes.io/job-name=job-{array_id}").items
check(len(pods) == 4, f"the array's pods: {[p.metadata.name for p in pods]}")
check(
    sorted(p.metadata.labels["batch.kubernetes.io/job-completion-index"] for p in pods) == ["0", "1", "2", "3"],
    "completion indexes",
)
print("ok array pods", " ".join(sorted(p.metadata.name for p in pods)))
job = batch.read_namespaced_job(f"job-{array_id}", "default")
check(job.spec.completions == 4 and job.spec.completion_mode == "Indexed", f"job spec: {job.spec}")
print("ok job", job.metadata.name, job.spec.completions)
d = apps.read_namespaced_deployment(service, "default")
check(d.spec.replicas >= 1 and d.metadata.generation == d.status.observed_generation, f"deployment: {d.status}")
rs = apps.list_namespaced_replica_set("default", label_selector=f"tandem.dev/service={service}").items
check(rs and rs[-1].metadata.annotations["deployment.kubernetes.io/revision"] == str(d.metadata.generation), "replica sets")
print("ok deployment", d.metadata.name, d.spec.replicas)
running = core.list_pod_for_all_namespaces(field_selector="status.phase=Running").items
check(all(p.status.phase == "Running" for p in running), "field selector")
print("ok field selector", len(running))

# Errors are metav1.Status, with the reason clients branch on.
try:
    apps.read_namespaced_deployment("no-such-thing", "default")
    check(False, "a missing deployment was found")
except client.ApiException as e:
    body = json.loads(e.body)
    check(e.status == 404 and body["kind"] == "Status" and body["reason"] == "NotFound", f"404: {e.body}")
    check(body["message"] == 'deployments.apps "no-such-thing" not found', body["message"])
print("ok not found")
try:
    core.list_namespaced_pod("default", label_selector="app in web")
    check(False, "a malformed selector was accepted")
except client.ApiException as e:
    check(e.status == 400 and json.loads(e.body)["reason"] == "BadRequest", f"400: {e.body}")
print("ok bad selector")
try:
    core.delete_namespaced_pod(f"job-{array_id}-0", "default")
    check(False, "a delete of a pod was accepted")
except client.ApiException as e:
    check(e.status == 405 and json.loads(e.body)["reason"] == "MethodNotAllowed", f"405: {e.body}")
check(core.read_namespaced_pod(f"job-{array_id}-0", "default").status.phase == "Running", "the pod survived")
print("ok pods read only")

# Without a token: 401 as a Status, and nothing else said.
host = api.configuration.host
ctx = ssl.create_default_context(cafile=api.configuration.ssl_ca_cert)
ctx.check_hostname = False
try:
    urllib.request.urlopen(urllib.request.Request(host + "/api/v1/namespaces/default/pods"), context=ctx)
    check(False, "an anonymous list was answered")
except urllib.error.HTTPError as e:
    body = json.loads(e.read())
    check(e.code == 401 and body["reason"] == "Unauthorized", f"401: {body}")
print("ok anonymous refused")

# Discovery, as DynamicClient does it (legacy discovery: /api, /apis, per group-version).
dc = dynamic.DynamicClient(api)
deps = dc.resources.get(api_version="apps/v1", kind="Deployment").get(namespace="default")
check(service in [x.metadata.name for x in deps.items], "dynamic client")
jobs = dc.resources.get(api_version="batch/v1", kind="Job").get(namespace="default")
check(f"job-{array_id}" in [x.metadata.name for x in jobs.items], "dynamic client jobs")
print("ok dynamic client")

# A pod's log, as the node reads the job's output file: whole, its last line, and streamed.
job = subprocess.run([sbatch, "--parsable", "-o", "py-%j.out", "--wrap", "echo hello from python; echo second"],
                     check=True, capture_output=True, text=True).stdout.strip()
pod, text = f"job-{job}-0", None
for _ in range(150):
    try:
        text = core.read_namespaced_pod_log(pod, "default")
        if text == "hello from python\nsecond\n":
            break
    except client.ApiException as e:
        check(e.status in (400, 409), f"a log not there yet is a 400 or a 409: {e.status} {e.body}")
    time.sleep(0.2)
check(text == "hello from python\nsecond\n", f"pod log: {text!r}")
check(core.read_namespaced_pod_log(pod, "default", tail_lines=1) == "second\n", "tail_lines")
r = core.read_namespaced_pod_log(pod, "default", follow=True, _preload_content=False)
check(r.read() == b"hello from python\nsecond\n", "a followed log of an ended job ends")
try:
    core.read_namespaced_pod_log(pod, "default", previous=True)
    check(False, "previous was accepted")
except client.ApiException as e:
    check(e.status == 400 and "previous" in json.loads(e.body)["message"], f"previous: {e.body}")
print("ok pod log")

# exec (WebSocket, the channel protocol): the output, the return code, input written.
pod = f"job-{array_id}-0"
out = stream(core.connect_get_namespaced_pod_exec, pod, "default", command=["sh", "-c", "echo hi; exit 4"],
             stderr=True, stdin=False, stdout=True, tty=False)
check(out == "hi\n", f"exec output: {out!r}")
r = stream(core.connect_get_namespaced_pod_exec, pod, "default", command=["sh", "-c", "echo out; exit 4"],
           stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False)
r.run_forever(timeout=60)
check(r.returncode == 4, f"exec returncode: {r.returncode}")
r = stream(core.connect_get_namespaced_pod_exec, pod, "default", command=["sh", "-c", "read line; echo got $line"],
           stderr=True, stdin=True, stdout=True, tty=False, _preload_content=False)
r.write_stdin("from python\n")
got, until = "", time.time() + 60
while r.is_open() and time.time() < until and "got from python" not in got:
    r.update(timeout=1)
    got += r.read_stdout() if r.peek_stdout() else ""
r.close()
check("got from python" in got, f"exec with input: {got!r}")
try:
    stream(core.connect_get_namespaced_pod_exec, pod, "default", command=["true"], stderr=True, stdin=False,
           stdout=True, tty=True)
    check(False, "stderr with tty was accepted")
except client.ApiException as e:
    # The client reports a refused upgrade as status 0, the server's Status in its reason.
    check("400" in e.reason and "tty" in e.reason, f"stderr with tty: {e.status} {e.reason}")
print("ok exec")

# A watch from a list's version sees a new job's pod come and run to its end, in order.
rv = core.list_namespaced_pod("default").metadata.resource_version
job = subprocess.run([sbatch, "--parsable", "--wrap", "sleep 1"], check=True, capture_output=True, text=True).stdout.strip()
pod = f"job-{job}-0"
seen, versions = [], []
w = watch.Watch()
for ev in w.stream(core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=60):
    obj = ev["object"]
    if obj.metadata.name != pod:
        continue
    seen.append((ev["type"], obj.status.phase))
    versions.append(int(obj.metadata.resource_version))
    if obj.status.phase == "Succeeded":
        w.stop()
check(seen and seen[0][0] == "ADDED" and seen[-1] == ("MODIFIED", "Succeeded"), f"watch events: {seen}")
check(versions == sorted(versions) and len(set(versions)) == len(versions), f"versions in order: {versions}")
print("ok watch", " ".join(f"{t}:{p}" for t, p in seen))

# A version from before the controller's start is gone: 410, after the client's one retry.
try:
    for _ in watch.Watch().stream(core.list_namespaced_pod, "default", resource_version="1", timeout_seconds=5):
        pass
    check(False, "a watch from an expired version was served")
except client.ApiException as e:
    check(e.status == 410, f"410: {e}")
print("ok expired")

# Writes through the typed client: a Deployment is a Tandem service.
body = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "pyweb", "labels": {"app": "pyweb"}},
    "spec": {
        "replicas": 1,
        "selector": {"matchLabels": {"app": "pyweb"}},
        "template": {
            "metadata": {"labels": {"app": "pyweb"}},
            "spec": {"containers": [{"name": "web", "command": ["sleep", "600"], "env": [{"name": "A", "value": "1"}]}]},
        },
    },
}
made = apps.create_namespaced_deployment("default", body)
check(made.metadata.name == "pyweb" and made.metadata.uid, "create")
kubernetes_validate.validate(raw("/apis/apps/v1/namespaces/default/deployments/pyweb"), "1.37.0", strict=True)
# Merge patch (a dict body) and JSON Patch (a list body).
apps.patch_namespaced_deployment("pyweb", "default", {"metadata": {"labels": {"tier": "x"}}})
check(apps.read_namespaced_deployment("pyweb", "default").metadata.labels.get("tier") == "x", "merge patch")
apps.patch_namespaced_deployment(
    "pyweb", "default", [{"op": "replace", "path": "/spec/template/spec/containers/0/env/0/value", "value": "2"}]
)
d = apps.read_namespaced_deployment("pyweb", "default")
check(d.spec.template.spec.containers[0].env[0].value == "2", "JSON patch")
check(d.metadata.generation == 2, f"a template change is a new revision: {d.metadata.generation}")
# Replace with a stale resourceVersion: 409; with the current one: done.
stale = d.metadata.resource_version
apps.patch_namespaced_deployment("pyweb", "default", {"metadata": {"labels": {"tier": "y"}}})
d.metadata.resource_version = stale
try:
    apps.replace_namespaced_deployment("pyweb", "default", d)
    check(False, "a stale replace was accepted")
except client.ApiException as e:
    check(e.status == 409 and json.loads(e.body)["reason"] == "Conflict", f"409: {e.body}")
d = apps.read_namespaced_deployment("pyweb", "default")
d.spec.replicas = 2
check(apps.replace_namespaced_deployment("pyweb", "default", d).spec.replicas == 2, "replace")
try:
    apps.create_namespaced_deployment("default", body)
    check(False, "a second create was accepted")
except client.ApiException as e:
    check(e.status == 409 and json.loads(e.body)["reason"] == "AlreadyExists", f"409: {e.body}")
apps.delete_namespaced_deployment("pyweb", "default")
print("ok writes")

# A Job through BatchV1Api: created (an sbatch array), watched to Complete, each Pod's index
# in its log, suspended and resumed with patches, deleted.
job_body = client.V1Job(
    metadata=client.V1ObjectMeta(name="pyjob"),
    spec=client.V1JobSpec(
        completions=2,
        parallelism=2,
        completion_mode="Indexed",
        suspend=True,
        template=client.V1PodTemplateSpec(
            spec=client.V1PodSpec(
                restart_policy="Never",
                containers=[
                    client.V1Container(name="c", command=["sh", "-c", "echo py-index=$JOB_COMPLETION_INDEX"], working_dir=os.getcwd())
                ],
            )
        ),
    ),
)
made = batch.create_namespaced_job("default", job_body)
check(made.metadata.name == "pyjob" and made.spec.suspend, f"create job: {made.spec}")
kubernetes_validate.validate(raw("/apis/batch/v1/namespaces/default/jobs/pyjob"), "1.37.0", strict=True)
batch.patch_namespaced_job("pyjob", "default", {"spec": {"suspend": False}})
done = False
for ev in watch.Watch().stream(batch.list_namespaced_job, "default", field_selector="metadata.name=pyjob", timeout_seconds=60):
    conds = ev["object"].status.conditions or []
    if any(c.type == "Complete" and c.status == "True" for c in conds):
        done = True
        break
check(done, "the Job never completed")
pods = core.list_namespaced_pod("default", label_selector="job-name=pyjob").items
logs = sorted(core.read_namespaced_pod_log(p.metadata.name, "default").strip() for p in pods)
check(logs == ["py-index=0", "py-index=1"], f"job logs: {logs}")
for p in pods:
    kubernetes_validate.validate(raw(f"/api/v1/namespaces/default/pods/{p.metadata.name}"), "1.37.0", strict=True)
try:
    batch.patch_namespaced_job("pyjob", "default", {"spec": {"completions": 5}})
    check(False, "a change of completions was accepted")
except client.ApiException as e:
    check(e.status == 422 and "immutable" in e.body, f"422: {e.body}")
batch.delete_namespaced_job("pyjob", "default")
try:
    batch.read_namespaced_job("pyjob", "default")
    check(False, "a deleted Job reads")
except client.ApiException as e:
    check(e.status == 404, f"404: {e.body}")
print("ok jobs")

# A namespace of one's own: made with CoreV1Api, a ConfigMap and a Deployment of the same name
# as one in default made in it (a Tandem service of its own, `NAME.NAMESPACE`), the Deployment
# taking its environment from that namespace's ConfigMap; listed per namespace and across all;
# the namespace deleted with what is in it.
ns = core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="py-team", labels={"team": "py"})))
check(ns.metadata.name == "py-team" and ns.status.phase == "Active", f"create namespace: {ns}")
kubernetes_validate.validate(raw("/api/v1/namespaces/py-team"), "1.37.0", strict=True)
check(raw("/api/v1/namespaces/py-team")["metadata"]["labels"]["team"] == "py", "its labels")
core.create_namespaced_config_map("py-team", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cfg"), data={"WHO": "py-team"}))
dep = client.V1Deployment(
    metadata=client.V1ObjectMeta(name=service),
    spec=client.V1DeploymentSpec(
        replicas=1,
        selector=client.V1LabelSelector(match_labels={"app": "py"}),
        template=client.V1PodTemplateSpec(
            metadata=client.V1ObjectMeta(labels={"app": "py"}),
            spec=client.V1PodSpec(
                containers=[
                    client.V1Container(
                        name="c",
                        command=["sleep", "600"],
                        env_from=[client.V1EnvFromSource(config_map_ref=client.V1ConfigMapEnvSource(name="cfg"))],
                    )
                ]
            ),
        ),
    ),
)
apps.create_namespaced_deployment("py-team", dep)
mine = apps.read_namespaced_deployment(service, "py-team")
check(mine.metadata.namespace == "py-team", f"namespace: {mine.metadata}")
check(mine.metadata.uid != apps.read_namespaced_deployment(service, "default").metadata.uid, "two Deployments, two uids")
check([d.metadata.name for d in apps.list_namespaced_deployment("py-team").items] == [service], "listed in its namespace")
everywhere = {(d.metadata.namespace, d.metadata.name) for d in apps.list_deployment_for_all_namespaces().items}
check({("py-team", service), ("default", service)} <= everywhere, f"across namespaces: {everywhere}")
kubernetes_validate.validate(raw(f"/apis/apps/v1/namespaces/py-team/deployments/{service}"), "1.37.0", strict=True)
try:
    core.create_namespaced_config_map("no-such-ns", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="x")))
    check(False, "an object was made in a namespace that does not exist")
except client.ApiException as e:
    check(e.status == 404 and "no-such-ns" in e.body, f"404: {e.body}")
# With its replica running: the namespace is Terminating until it has stopped.
deadline = time.time() + 60
while (apps.read_namespaced_deployment(service, "py-team").status.ready_replicas or 0) < 1:
    check(time.time() < deadline, "the namespace's replica never became ready")
    time.sleep(0.3)
st = core.delete_namespace("py-team")
check((st["status"] if isinstance(st, dict) else st.status) == "Success", f"delete_namespace: {st}")
deadline = time.time() + 60
while any(n.metadata.name == "py-team" for n in core.list_namespace().items):
    check(time.time() < deadline, "the namespace was never gone")
    time.sleep(0.3)
check(apps.list_namespaced_deployment("py-team").items == [], "its Deployment went with it")
check(apps.read_namespaced_deployment(service, "default").metadata.name == service, "default's stays")
print("ok namespaces")

# `utils.create_from_yaml` of a multi-document file: a ConfigMap, a Service and a Deployment
# taking its environment from the ConfigMap, created in order; then read back and deleted.
from kubernetes import utils

multi = os.path.join(os.getcwd(), "multi.yaml")
with open(multi, "w") as f:
    f.write(
        """apiVersion: v1
kind: ConfigMap
metadata: {name: multi-cfg}
data: {GREETING: from-yaml}
---
apiVersion: v1
kind: Service
metadata: {name: multi}
spec:
  selector: {app: multi}
  ports: [{port: 80}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: multi}
spec:
  replicas: 0
  selector: {matchLabels: {app: multi}}
  template:
    metadata: {labels: {app: multi}}
    spec:
      containers:
      - name: c
        command: [sleep, "600"]
        envFrom: [{configMapRef: {name: multi-cfg}}]
"""
    )
made = utils.create_from_yaml(api, multi, namespace="default")
check(len(made) == 3, f"create_from_yaml made {made}")
d = apps.read_namespaced_deployment("multi", "default")
check(d.spec.template.spec.containers[0].env_from[0].config_map_ref.name == "multi-cfg", f"{d.spec.template}")
svc = core.read_namespaced_service("multi", "default")
check(svc.metadata.annotations.get("tandem.dev/proxy-paths") == "/s/multi/", f"{svc.metadata.annotations}")
for obj in (
    raw("/api/v1/namespaces/default/configmaps/multi-cfg"),
    raw("/api/v1/namespaces/default/services/multi"),
    raw("/apis/apps/v1/namespaces/default/deployments/multi"),
):
    kubernetes_validate.validate(obj, "1.37.0", strict=True)
apps.delete_namespaced_deployment("multi", "default")
core.delete_namespaced_service("multi", "default")
core.delete_namespaced_config_map("multi-cfg", "default")
print("ok create_from_yaml")
