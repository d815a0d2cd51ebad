"""deploy/: the manifests, units and image a fleet is deployed with (docs/fleet.md), checked for
what a mistake in them would break.

Every YAML parses; the Kubernetes objects match Kubernetes' schemas (kubernetes-validate, when
installed) and the RayCluster KubeRay's (deploy/schemas); each `hutch`, `ray start` and KubeRay
rayStartParams line parses with the real parsers; box hosts are privileged and mount the shared
volume where --shared says, declare hutch's Ray resources in the form KubeRay's autoscaler reads,
and fit them in their container; API servers carry --store, --ray and --shared and sit beside a
Ray node; the systemd units keep boxes across a restart; the image's Ray is the cluster's; and
deploy/import_template.py brings a template over as a node would accept it.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import pytest

from hutch.cli.program import build_parser

yaml = pytest.importorskip("yaml")  # PyYAML (here through Ray, hutch[fleet]); untyped: Any

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
KUBERAY = DEPLOY / "kuberay"
SYSTEMD = DEPLOY / "systemd"
K8S_VERSIONS = ("1.28.0", "1.33.0")  # the schemas' versions the core objects must match
VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")  # Kubernetes' $(VAR) in command and args

Obj = dict[str, Any]


# --- reading ---------------------------------------------------------------------------------------

def documents(path: Path) -> list[Obj]:
    with path.open() as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    assert all(isinstance(d, dict) for d in docs), path
    return cast(list[Obj], docs)


def all_objects() -> list[tuple[Path, Obj]]:
    return [(path, doc) for path in sorted(DEPLOY.rglob("*.yaml")) for doc in documents(path)]


def only(kind: str, name: str | None = None) -> Obj:
    found = [o for _, o in all_objects() if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"one {kind} {name or ''} in deploy/, found {len(found)}"
    return found[0]


def raycluster() -> Obj:
    return only("RayCluster")


def pod_templates() -> list[tuple[str, Obj]]:
    """Every pod template in deploy/: (where, template)."""
    found = []
    for path, o in all_objects():
        if o["kind"] in ("Deployment", "StatefulSet"):
            found.append((f"{path.name}: {o['kind']} {o['metadata']['name']}", o["spec"]["template"]))
        if o["kind"] == "RayCluster":
            found.append((f"{path.name}: head", o["spec"]["headGroupSpec"]["template"]))
            for g in o["spec"]["workerGroupSpecs"]:
                found.append((f"{path.name}: worker group {g['groupName']}", g["template"]))
    return found


def containers(template: Obj) -> list[Obj]:
    return cast(list[Obj], template["spec"]["containers"])


def argv(container: Obj) -> list[str]:
    return [*container.get("command", []), *container.get("args", [])]


def runs(container: Obj, *words: str) -> bool:
    return argv(container)[:len(words)] == list(words)


def flag(args: list[str], name: str) -> str | None:
    """The value of --name=V or --name V."""
    for i, a in enumerate(args):
        if a.startswith(f"{name}="):
            return a.split("=", 1)[1]
        if a == name and i + 1 < len(args):
            return args[i + 1]
    return None


def mount_of(template: Obj, container: Obj, path: str) -> Obj | None:
    """The volume mounted at `path` in the container."""
    for m in container.get("volumeMounts", []):
        if m["mountPath"].rstrip("/") == path.rstrip("/"):
            return cast(Obj, next(v for v in template["spec"].get("volumes", []) if v["name"] == m["name"]))
    return None


def mebibytes(quantity: str) -> float:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(quantity))
    assert m and (not m[2] or m[2] in units), quantity
    return float(m[1]) * units.get(m[2], 1) / 2**20


def kuberay_resources(value: str) -> dict[str, Any]:
    """A rayStartParams `resources` read as KubeRay's autoscaler reads it (the value in double
    quotes, the JSON's quotes escaped): the outer quotes dropped, the backslashes removed."""
    parsed = json.loads(value[1:-1].replace("\\", ""))
    assert isinstance(parsed, dict)
    return parsed


def kuberay_ray_start(params: dict[str, str], head: bool) -> list[str]:
    """The `ray start` words KubeRay writes for rayStartParams (convertParamMap), as bash splits them."""
    words = ["--head"] if head else ["--address=hutch-head-svc:6379"]
    for key in sorted(params):
        value = params[key]
        if value.lower() in ("true", "false") and key not in ("log-color", "include-dashboard", "include-log-monitor"):
            words += [f"--{key}"] if value.lower() == "true" else []
        else:
            words += shlex.split(f"--{key}={value}")
    return [*words, "--block"]


def parse_ray_start(words: list[str]) -> dict[str, Any]:
    """`ray start`'s own parser (click) over the words, or pytest.fail."""
    scripts = pytest.importorskip("ray.scripts.scripts")
    try:
        with scripts.start.make_context("start", list(words)) as ctx:
            return cast(dict[str, Any], ctx.params)
    except Exception as e:  # click's UsageError and kin
        pytest.fail(f"ray start {' '.join(words)}: {e}")


def parse_hutch(words: list[str]) -> Any:
    try:
        return build_parser().parse_args(words)
    except SystemExit:
        pytest.fail(f"hutch does not take: hutch {' '.join(words)}")


# --- every file ------------------------------------------------------------------------------------

def test_every_yaml_parses_into_named_objects() -> None:
    objects = all_objects()
    assert {o["kind"] for _, o in objects} >= {"RayCluster", "Deployment", "Service", "PersistentVolumeClaim", "StatefulSet"}
    for path, o in objects:
        assert o.get("apiVersion") and o.get("kind") and o.get("metadata", {}).get("name"), path


def test_every_var_a_container_refers_to_is_in_its_env() -> None:
    # An undefined $(VAR) stays in the arguments as it is written: a node listening on "$(POD_IP)"
    for where, template in pod_templates():
        for c in containers(template):
            defined = {e["name"] for e in c.get("env", [])}
            for word in argv(c):
                for name in VAR.findall(word):
                    assert name in defined, f"{where}, {c['name']}: $({name}) is not in its env"


def test_one_image_everywhere() -> None:
    # Ray refuses members of another version: head, box hosts, API servers run the same image
    images = {c["image"] for where, t in pod_templates() if "postgres" not in where for c in containers(t)}
    assert len(images) == 1, images


# --- schemas ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_core_objects_match_kubernetes_schemas(version: str) -> None:
    kv = pytest.importorskip("kubernetes_validate")
    checked = 0
    for path, o in all_objects():
        if o["kind"] == "RayCluster":
            continue
        try:
            kv.validate(o, version, strict=True)  # strict: a misspelt field is an error, not dropped
        except kv.ValidationError as e:
            pytest.fail(f"{path.name}: {o['kind']} {o['metadata']['name']}: {e.message} at {list(e.path)}")
        checked += 1
    assert checked >= 5


def test_raycluster_matches_kuberay_crd_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((DEPLOY / "schemas" / "raycluster-v1.schema.json").read_text())
    try:
        jsonschema.validate(raycluster(), schema)
    except jsonschema.ValidationError as e:
        pytest.fail(f"RayCluster: {e.message} at {list(e.absolute_path)}")


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_raycluster_pod_templates_match_kubernetes_schemas(version: str) -> None:
    # The pruned CRD schema leaves the pod templates to Kubernetes' own PodTemplateSpec
    kv = pytest.importorskip("kubernetes_validate")
    for where, template in pod_templates():
        if "worker group" not in where and "head" not in where:
            continue
        try:
            kv.validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template},
                        version, strict=True)
        except kv.ValidationError as e:
            pytest.fail(f"{where}: {e.message} at {list(e.path)}")


# --- the RayCluster ----------------------------------------------------------------------------------

def box_groups() -> list[tuple[Obj, Obj]]:
    """Each worker group that runs boxes, with its `hutch node` container."""
    found = []
    for g in raycluster()["spec"]["workerGroupSpecs"]:
        nodes = [c for c in containers(g["template"]) if runs(c, "hutch", "node")]
        if nodes:
            assert len(nodes) == 1, g["groupName"]
            found.append((g, nodes[0]))
    assert found, "no worker group runs hutch node"
    return found


def test_head_runs_no_work_and_the_autoscaler_is_on() -> None:
    spec = raycluster()["spec"]
    assert spec["headGroupSpec"]["rayStartParams"].get("num-cpus") == "0"
    assert spec["enableInTreeAutoscaling"] is True  # request_resources grows the box hosts
    head = containers(spec["headGroupSpec"]["template"])[0]
    assert 6379 in {p["containerPort"] for p in head.get("ports", [])}


def test_box_hosts_keep_kuberays_ray_container_first_and_the_node_privileged() -> None:
    for g, node in box_groups():
        first = containers(g["template"])[0]
        assert not runs(first, "hutch"), f"{g['groupName']}: KubeRay takes the first container for Ray's"
        assert node.get("securityContext", {}).get("privileged") is True, "runsc needs a privileged container"
        assert "--ray-started" in argv(node), "KubeRay's container is the Ray node: hutch must not start one"


def test_box_hosts_declare_hutch_resources_as_kuberay_reads_them() -> None:
    for g, node in box_groups():
        params = g["rayStartParams"]
        assert not g.get("resources"), "KubeRay refuses resources in both rayStartParams and the group's field"
        resources = kuberay_resources(params["resources"])
        for name in ("hutch_vcpu", "hutch_memory_mib"):
            assert isinstance(resources.get(name), int) and resources[name] > 0, f"{g['groupName']}: {name}"
        # what Ray is told is what bash hands ray start, and ray start takes every param
        parsed = parse_ray_start(kuberay_ray_start(params, head=False))
        assert json.loads(parsed["resources"]) == resources
        # the boxes' memory fits in the container that runs them, with room for the runtime
        limit = mebibytes(node["resources"]["limits"]["memory"])
        assert resources["hutch_memory_mib"] + 1024 <= limit, f"{g['groupName']}: boxes may reserve more than the pod has"


def test_head_ray_start_params_parse() -> None:
    parse_ray_start(kuberay_ray_start(raycluster()["spec"]["headGroupSpec"]["rayStartParams"], head=True))


def shared_pvc() -> Obj:
    pvc = only("PersistentVolumeClaim")
    assert "ReadWriteMany" in pvc["spec"]["accessModes"], "box hosts and API servers mount it at once"
    return pvc


def assert_shared_mounted(where: str, template: Obj, container: Obj, args: list[str]) -> None:
    shared = flag(args, "--shared")
    assert shared, f"{where}: no --shared"
    volume = mount_of(template, container, shared)
    assert volume is not None, f"{where}: nothing is mounted at --shared {shared}"
    assert volume.get("persistentVolumeClaim", {}).get("claimName") == shared_pvc()["metadata"]["name"], where


def assert_ray_sockets_shared(where: str, template: Obj, ray: Obj, hutch: Obj) -> None:
    # the driver in the hutch container connects to the Ray node's sockets under /tmp/ray
    a, b = mount_of(template, ray, "/tmp/ray"), mount_of(template, hutch, "/tmp/ray")
    assert a is not None and a == b, f"{where}: /tmp/ray is not one volume in both containers"


def test_box_hosts_mount_the_shared_volume_and_share_rays_sockets() -> None:
    for g, node in box_groups():
        template = g["template"]
        assert_shared_mounted(g["groupName"], template, node, argv(node))
        assert_ray_sockets_shared(g["groupName"], template, containers(template)[0], node)


def test_box_hosts_command_line_parses_and_points_at_the_fleet() -> None:
    head_svc = f"{raycluster()['metadata']['name']}-head-svc:6379"
    for g, node in box_groups():
        args = parse_hutch(argv(node)[1:])
        assert args.cmd == "node" and args.ray_started
        assert args.ray == head_svc, "the head's Service is <RayCluster name>-head-svc"
        assert args.listen.startswith("$(POD_IP)"), "the relay listens on the pod's address, where Ray knows it"
        assert_store(args.store, g["groupName"], node)
        assert 7430 in {p["containerPort"] for p in node.get("ports", [])} or args.listen.endswith(":7430")


def assert_store(url: str, where: str, container: Obj) -> None:
    postgres = only("Service", "hutch-postgres")
    assert url.startswith("postgresql://"), where
    userinfo, _, hostport = url[len("postgresql://"):].partition("/")[0].rpartition("@")
    assert ":" not in userinfo, f"{where}: the store's password is in the command line"
    assert hostport.split(":")[0] == postgres["metadata"]["name"], where
    assert "PGPASSWORD" in {e["name"] for e in container.get("env", [])}, f"{where}: libpq gets no password"


# --- API servers -----------------------------------------------------------------------------------

def api_pod() -> tuple[Obj, Obj, Obj]:
    """The API servers' pod template, its `hutch serve` container and its Ray node's."""
    deployment = only("Deployment", "hutch-api")
    template = deployment["spec"]["template"]
    serve = [c for c in containers(template) if runs(c, "hutch", "serve")]
    ray = [c for c in containers(template) if runs(c, "ray", "start")]
    assert len(serve) == 1 and len(ray) == 1, "one hutch serve and the Ray node it drives through"
    return template, serve[0], ray[0]


def test_api_servers_carry_store_ray_and_shared() -> None:
    template, serve, ray = api_pod()
    args = parse_hutch(argv(serve)[1:])
    assert args.cmd == "serve" and args.store and args.ray and args.shared
    assert args.ray == f"{raycluster()['metadata']['name']}-head-svc:6379"
    assert_store(args.store, "hutch-api", serve)
    assert_shared_mounted("hutch-api", template, serve, argv(serve))
    assert args.public_url, "clients are sent to --public-url for the data plane (else to --host)"
    # its Ray node: in the same cluster, at the same address the driver says, running nothing
    started = parse_ray_start(argv(ray)[2:])
    assert started["address"] == args.ray and started["num_cpus"] == 0
    assert not json.loads(started.get("resources") or "{}"), "no hutch resources: nothing is placed beside an API server"
    assert args.ray_node_ip == started["node_ip_address"] == "$(POD_IP)"
    assert_ray_sockets_shared("hutch-api", template, ray, serve)


def test_services_select_their_pods_and_name_real_ports() -> None:
    for _, o in all_objects():
        if o["kind"] != "Service":
            continue
        name = o["metadata"]["name"]
        owners = [d for _, d in all_objects() if d["kind"] in ("Deployment", "StatefulSet")
                  and all(d["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in o["spec"]["selector"].items())]
        assert len(owners) == 1, f"Service {name} selects {len(owners)} workloads"
        ports = {p.get("name") for c in containers(owners[0]["spec"]["template"]) for p in c.get("ports", [])}
        for p in o["spec"]["ports"]:
            assert p["targetPort"] in ports, f"Service {name}: no container port named {p['targetPort']}"


# --- systemd -------------------------------------------------------------------------------------

def unit(name: str) -> dict[str, list[str]]:
    """A unit's settings, section.Key -> every value (a key may repeat)."""
    out: dict[str, list[str]] = {}
    section = ""
    for line in (SYSTEMD / name).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        out.setdefault(f"{section}.{key}", []).append(value)
    return out


def env_file(name: str) -> dict[str, str]:
    """As systemd reads one: a value in single quotes is taken as it stands inside them."""
    out = {}
    for line in (SYSTEMD / name).read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            value = value.strip()
            out[key.strip()] = value[1:-1] if value[:1] == value[-1:] == "'" else value
    return out


def exec_start(name: str) -> list[str]:
    """ExecStart's words with ${VAR} put in from the env files (each one word, as systemd does)."""
    env = {**env_file("fleet.env"), **env_file("secret.env")}
    words = unit(name)["Service.ExecStart"][0].split()
    for i, w in enumerate(words):
        m = re.fullmatch(r"\$\{(\w+)\}(.*)", w)
        if m:
            assert m[1] in env, f"{name}: ${{{m[1]}}} is in no env file"
            words[i] = env[m[1]] + m[2]
    return words


def test_units_restart_and_raise_open_files() -> None:
    for name in ("hutch-node.service", "hutch-serve.service", "ray-node.service", "ray-head.service"):
        u = unit(name)
        assert u["Service.Restart"] == ["always"], name
        assert int(u["Service.LimitNOFILE"][0]) >= 65536, name


def test_node_unit_keeps_boxes_across_a_restart() -> None:
    u = unit("hutch-node.service")
    assert u["Service.KillMode"] == ["process"], "a cgroup kill would take the boxes with the runtime"
    assert u["Service.TasksMax"] == ["infinity"]
    # and the Ray node is its own unit, which a restart of hutch node leaves up
    args = parse_hutch(exec_start("hutch-node.service")[1:])
    assert args.cmd == "node" and args.ray_started
    assert "ray-node.service" in " ".join(u["Unit.Requires"])


def test_ray_node_unit_declares_hutch_resources() -> None:
    words = exec_start("ray-node.service")
    assert words[1] == "start"
    parsed = parse_ray_start(words[2:])
    resources = json.loads(parsed["resources"])
    assert resources["hutch_vcpu"] > 0 and resources["hutch_memory_mib"] > 0
    parse_ray_start(exec_start("ray-head.service")[2:])


def test_serve_unit_carries_store_ray_and_shared() -> None:
    args = parse_hutch(exec_start("hutch-serve.service")[1:])
    assert args.cmd == "serve" and args.store.startswith("postgresql://") and args.ray and args.shared
    assert "@" in args.store and ":" not in args.store.split("//", 1)[1].split("@")[0], "a password in the unit"
    assert args.public_url, "clients are sent to --public-url for the data plane (else to --host)"
    for name in ("hutch-node.service", "hutch-serve.service"):
        assert str(args.shared) in " ".join(unit(name)["Unit.RequiresMountsFor"]), name


# --- the image -------------------------------------------------------------------------------------

def test_image_installs_runsc_as_scripts_install_does_and_the_clusters_ray() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM debian:12$", text, re.M)
    # the compiled agent, built in a stage of its own, where the nodes find it (outside the mounted cache)
    assert "COPY --from=agent /out/hutch-agent /opt/hutch/agent/hutch-agent" in text
    assert "ENV HUTCH_AGENT_DIR=/opt/hutch/agent" in text
    assert "apt-get install -y -q -t trixie runsc" in text and "Pin: release n=trixie" in text
    assert '"/src[fleet]"' in text
    m = re.search(r"^ARG RAY_VERSION=(\S+)$", text, re.M)
    assert m and m[1] == raycluster()["spec"]["rayVersion"], "the image's Ray is the RayCluster's"


# --- bringing a template over ------------------------------------------------------------------------

def importer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("import_template", DEPLOY / "import_template.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_import_template_copies_the_root_where_nodes_boot_from(tmp_path: Path) -> None:
    from hutch.fleet.nodeside import NodeCalls
    from hutch.services.system_templates import BASE_TEMPLATE, BASE_TEMPLATE_ID
    from hutch.store import Store, TemplateRecord

    mod = importer()
    source, fleet = Store(f"sqlite:///{tmp_path / 'single.db'}"), Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    shared, cache = tmp_path / "shared", tmp_path / "cache"
    built = tmp_path / "single" / "templates" / "abc123" / "rootfs"
    (built / "etc").mkdir(parents=True)
    (built / "etc" / "marker").write_text("built here")
    spec = {"name": "py", "vcpu": 2, "memory_mib": 2048, "ready_timeout_seconds": 30, "steps": [{"run": "true"}]}
    team = source.create_team("default")
    fleet_team = fleet.create_team("default")
    for store, root in ((source, tmp_path / "single-cache" / "base" / "rootfs"), (fleet, cache / "base" / "rootfs")):
        store.put_system_template(TemplateRecord(id=BASE_TEMPLATE_ID, team_id=None, name=BASE_TEMPLATE, spec={},
                                                 rootfs=str(root)))
    source.put_template(TemplateRecord(id="t1", team_id=team, name="py", spec=spec, rootfs=str(built),
                                       env={"A": "1"}, workdir="/app", user="user"))
    source.put_template(TemplateRecord(id="t2", team_id=team, name="env-only", spec=spec,
                                       rootfs=str(tmp_path / "single-cache" / "base" / "rootfs")))

    copy = mod.import_template(source, fleet, shared, "default", "py")
    got = fleet.get_template("py", fleet_team)
    assert got is not None and got.rootfs == copy.rootfs == str(shared / "templates" / "abc123" / "rootfs")
    assert (got.env, got.workdir, got.user, got.spec, got.team_id) == ({"A": "1"}, "/app", "user", spec, fleet_team)
    assert (Path(got.rootfs) / "etc" / "marker").read_text() == "built here"
    # a node takes the root: under its roots (its cache dir and DIR/templates), and there
    calls = NodeCalls("n1", cast(Any, None), None, (cache, shared / "templates"), shared / "checkpoints")
    assert calls._root(got.rootfs) == Path(got.rootfs).resolve()
    # a build that wrote nothing boots from the nodes' own base
    assert mod.import_template(source, fleet, shared, "default", "env-only").rootfs == str(cache / "base" / "rootfs")
    with pytest.raises(mod.CannotImport, match="already"):
        mod.import_template(source, fleet, shared, "default", "py")
    with pytest.raises(mod.CannotImport, match="no template"):
        mod.import_template(source, fleet, shared, "default", "missing")
