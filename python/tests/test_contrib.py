"""contrib/ checked (issues 54, 52): the systemd unit that `make install` puts in place and the
worker's unit (systemd-analyze verify where it is installed, and what the worker's unit must
say), the Kubernetes DaemonSet and the workers' Deployment (a schema validator, their shape, and
`prepfs check` of their configs), and the Grafana dashboard against a real Prometheus server
scraping a live mount.

- The units are verified with `systemd-analyze verify` (offline, the binary's path pointed at a
  stub) where it is installed; skipped, saying so, where not.
- The manifests are validated with kubernetes-validate (`pip install kubernetes-validate`:
  Kubernetes' OpenAPI schemas, offline) where it is installed; skipped, saying so, where not.
- The dashboard: every panel's query is run through Prometheus's HTTP API (Debian's
  `prometheus`, on the PATH) against a mount scraped once a second, after reads through a job's
  views and a recipe's, and must return data. Without a `prometheus` binary that test is skipped,
  and a second test (which always runs) checks every metric a panel names is in the live mount's
  `.prepfs/metrics`.
"""

import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO, detach, is_mounted, make_id_dataset, need_fuse, prepfs_bin

CONTRIB = REPO / "contrib"
DAEMONSET = CONTRIB / "kubernetes" / "prepfs-daemonset.yaml"
WORKER_UNIT = CONTRIB / "prepfs-worker@.service"
WORKER_DEPLOYMENT = CONTRIB / "kubernetes" / "prepfs-worker-deployment.yaml"
DASHBOARD = CONTRIB / "grafana" / "prepfs.json"


# ---------------------------------------------------------------------------------------------
# make install: the systemd unit


def test_make_install_puts_the_systemd_units_in_place(tmp_path):
    binary = prepfs_bin()
    stage = tmp_path / "stage"
    args = ["make", "-s", "-C", str(REPO), f"DESTDIR={stage}", f"BIN={binary}", "PREFIX=/opt/prepfs"]
    subprocess.run(args + ["install"], check=True, timeout=300, stdout=subprocess.DEVNULL)
    unit = stage / "etc" / "systemd" / "system" / "prepfs@.service"
    assert unit.is_file(), sorted(str(p.relative_to(stage)) for p in stage.rglob("*"))
    assert stat.S_IMODE(unit.stat().st_mode) == 0o644
    text = unit.read_text()
    assert "ExecStart=/opt/prepfs/bin/prepfs mount --config /etc/prepfs/%i.yaml" in text, text
    assert (stage / "opt" / "prepfs" / "bin" / "prepfs").is_file()
    worker = stage / "etc" / "systemd" / "system" / "prepfs-worker@.service"
    assert stat.S_IMODE(worker.stat().st_mode) == 0o644
    assert "ExecStart=/opt/prepfs/bin/prepfs worker --config /etc/prepfs/%i.yaml" in worker.read_text()
    subprocess.run(args + ["uninstall"], check=True, timeout=60, stdout=subprocess.DEVNULL)
    left = [str(p.relative_to(stage)) for p in stage.rglob("*") if not p.is_dir()]
    assert left == [], left


# ---------------------------------------------------------------------------------------------
# The units: systemd-analyze verify, and the worker's


@pytest.mark.parametrize("unit", ["prepfs@.service", "prepfs-worker@.service"])
def test_unit_passes_systemd_analyze_verify(unit, tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian: systemd)")
    # verify refuses an ExecStart whose binary is missing: point it at a stub, as make install
    # points it at the installed binary.
    stub = tmp_path / "prepfs"
    stub.write_text("#!/bin/sh\n")
    stub.chmod(0o755)
    text = (CONTRIB / unit).read_text()
    assert "/usr/local/bin/prepfs " in text, text
    (tmp_path / unit).write_text(text.replace("/usr/local/bin/prepfs ", f"{stub} "))
    run = subprocess.run([analyze, "verify", str(tmp_path / unit)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    # It exits 0 past an unknown key or a value it cannot parse ("..., ignoring"): any word on
    # this unit is a fault.
    stem = unit.split("@")[0] + "@"
    said = [line for line in (run.stdout + run.stderr).splitlines() if stem in line]
    assert not said, "\n".join(said)


def _unit_keys(path):
    """The unit's `Key=value` lines, by section, each key's values in order (a key may repeat)."""
    keys, section = {}, None
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        keys.setdefault((section, key), []).append(value)
    return keys


def test_worker_unit_runs_the_worker_read_only_and_drains():
    keys = _unit_keys(WORKER_UNIT)

    def one(key):
        (value,) = keys[("Service", key)]
        return value

    assert one("ExecStart").startswith("/usr/local/bin/prepfs worker --config /etc/prepfs/%i.yaml"), one("ExecStart")
    assert one("Restart") == "on-failure"
    assert one("KillSignal") == "SIGTERM"
    # A stop drains: the items in hand are finished, and a source read ends within
    # source.timeout (30 s by default).
    assert int(one("TimeoutStopSec")) > 30
    assert one("CPUAccounting") == "yes"
    # Its own user, reading the source as that user; nothing written but the journal.
    assert one("User") not in ("", "root", "0")
    assert one("ProtectSystem") == "strict"
    assert one("NoNewPrivileges") == "yes"
    assert one("CapabilityBoundingSet") == ""
    assert ("Service", "ReadWritePaths") not in keys and ("Service", "StateDirectory") not in keys


# ---------------------------------------------------------------------------------------------
# Kubernetes


def _documents(path=DAEMONSET):
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed")
    return list(yaml.safe_load_all(path.read_text()))


def test_daemonset_passes_a_schema_validator():
    validator = shutil.which("kubernetes-validate")
    if validator is None:
        pytest.skip("kubernetes-validate is not installed (pip install kubernetes-validate)")
    run = subprocess.run([validator, "--strict", str(DAEMONSET)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    kinds = {d["kind"] for d in _documents()}
    assert {"DaemonSet", "ConfigMap"} <= kinds, kinds


def test_daemonset_mounts_with_bidirectional_propagation():
    ds = next(d for d in _documents() if d["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["securityContext"]["privileged"] is True
    propagated = [m for m in container["volumeMounts"] if m.get("mountPropagation") == "Bidirectional"]
    assert len(propagated) == 1, container["volumeMounts"]
    mountpoint = container["command"][3]
    assert mountpoint.startswith(propagated[0]["mountPath"] + "/"), (mountpoint, propagated)
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "hostPath" in volumes[propagated[0]["name"]]
    assert pod["terminationGracePeriodSeconds"] > 60, "a stop drains for up to --drain-max (60 s)"


def test_daemonset_config_passes_prepfs_check(tmp_path):
    binary = prepfs_bin()
    config = next(d for d in _documents() if d["kind"] == "ConfigMap")["data"]["train.yaml"]
    (tmp_path / "train.yaml").write_text(config)
    (tmp_path / "src").mkdir()
    run = subprocess.run([str(binary), "check", str(tmp_path / "train.yaml"), "--source", str(tmp_path / "src"),
                          "--mountpoint", str(tmp_path / "mnt")], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


def _worker_pod():
    deployment = next(d for d in _documents(WORKER_DEPLOYMENT) if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]
    return deployment, pod["metadata"], pod["spec"]


def test_worker_deployment_passes_a_schema_validator():
    validator = shutil.which("kubernetes-validate")
    if validator is None:
        pytest.skip("kubernetes-validate is not installed (pip install kubernetes-validate)")
    run = subprocess.run([validator, "--strict", str(WORKER_DEPLOYMENT)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    kinds = {d["kind"] for d in _documents(WORKER_DEPLOYMENT)}
    assert {"Deployment", "ConfigMap"} <= kinds, kinds
    # The Secret is made from the files (the header's command), never shipped with a value.
    assert "Secret" not in kinds, kinds


def _option(command, name):
    (value,) = [a.split("=", 1)[1] for a in command if a.startswith(f"--{name}=")]
    return value


def test_worker_deployment_is_non_root_read_only_and_drains():
    deployment, meta, pod = _worker_pod()
    assert deployment["spec"]["replicas"] == 4
    (worker,) = pod["containers"]
    command = worker["command"]
    assert command[:2] == ["prepfs", "worker"], command
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert "fsGroup" not in pod["securityContext"], "fsGroup makes the Secret's files group-readable: refused as a secret"
    for container in pod["containers"] + pod["initContainers"]:
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True, container["name"]
        assert context["allowPrivilegeEscalation"] is False, container["name"]
        assert context["capabilities"]["drop"] == ["ALL"], container["name"]
    mounts = {m["mountPath"]: m for m in worker["volumeMounts"]}
    assert all(m.get("readOnly") for m in mounts.values()), worker["volumeMounts"]
    assert _option(command, "source") in mounts, (command, mounts)
    # A stop drains: the items in hand finish, a source read within source.timeout (30 s).
    assert pod["terminationGracePeriodSeconds"] > 30
    # One thread per core lent, and the cores asked for and capped.
    threads = _option(command, "threads")
    assert worker["resources"]["requests"]["cpu"] == worker["resources"]["limits"]["cpu"] == threads
    # Metrics where the scrape annotations say.
    port = int(_option(command, "metrics-addr").rsplit(":", 1)[1])
    assert [p["containerPort"] for p in worker["ports"] if p["name"] == "metrics"] == [port]
    assert meta["annotations"]["prometheus.io/scrape"] == "true"
    assert meta["annotations"]["prometheus.io/port"] == str(port)


def test_worker_deployment_config_names_private_copies_of_the_secret():
    _, _, pod = _worker_pod()
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed")
    config_map = next(d for d in _documents(WORKER_DEPLOYMENT) if d["kind"] == "ConfigMap")
    remote = yaml.safe_load(config_map["data"]["train.yaml"])["cache"]["remote"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    (worker,) = pod["containers"]
    (init,) = pod["initContainers"]
    # The init container copies the Secret's files at 0600 into a memory emptyDir ...
    command = init["command"]
    assert command[:3] == ["install", "-m", "0600"], command
    target = command[command.index("-t") + 1]
    init_mounts = {m["mountPath"]: m["name"] for m in init["volumeMounts"]}
    assert volumes[init_mounts[target]]["emptyDir"]["medium"] == "Memory"
    copied = {f"{target}/{Path(f).name}" for f in command[command.index("-t") + 2:]}
    for source in command[command.index("-t") + 2:]:
        assert "secret" in volumes[init_mounts[str(Path(source).parent)]], source
    # ... which the worker mounts, and its config names those copies, not the Secret's files.
    worker_mounts = {m["mountPath"]: m["name"] for m in worker["volumeMounts"]}
    assert worker_mounts[target] == init_mounts[target]
    for key in ("secret_file", "password_file"):
        assert remote[key] in copied, (key, remote[key], copied)


def test_worker_deployment_config_passes_prepfs_check(tmp_path):
    binary = prepfs_bin()
    _, _, pod = _worker_pod()
    (init,) = pod["initContainers"]
    target = init["command"][init["command"].index("-t") + 1]
    config = next(d for d in _documents(WORKER_DEPLOYMENT) if d["kind"] == "ConfigMap")["data"]["train.yaml"]
    # The check reads the secret and password files: private ones here, where the copies would be.
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    for name in ("redis.secret", "redis.password"):
        (private / name).write_bytes(os.urandom(16).hex().encode())
        (private / name).chmod(0o600)
    assert target + "/" in config, config
    (tmp_path / "train.yaml").write_text(config.replace(target + "/", f"{private}/"))
    (tmp_path / "src").mkdir()
    run = subprocess.run([str(binary), "check", str(tmp_path / "train.yaml"), "--source", str(tmp_path / "src"),
                          "--mountpoint", str(tmp_path / "mnt")], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


# ---------------------------------------------------------------------------------------------
# Grafana


def _exprs():
    dash = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dash["panels"]:
        for target in panel["targets"]:
            out.append((panel["title"], target["expr"]))
    assert out, "the dashboard has no queries"
    return out


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(proc):
    return proc is not None and proc.poll() is None


@pytest.fixture(scope="module")
def scraped_mount(tmp_path_factory):
    """A mount with a recipe and --metrics-addr, read through a job's augmented view and recipe
    view, with a lookup that fails (ENOENT); yields (mountpoint, metrics port, read_more)."""
    need_fuse()
    binary = prepfs_bin()
    base = tmp_path_factory.mktemp("contrib")
    source = make_id_dataset(base / "src", classes=3, per_class=6)
    mountpoint = base / "mnt"
    mountpoint.mkdir()
    config = base / "mount.yaml"
    config.write_text("cache: { memory: 64MiB }\n"
                      "recipes:\n  small: { augment: [ {random_resized_crop: {size: 32}} ] }\n")
    port = _free_port()
    log = base / "prepfs.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen([str(binary), "mount", str(source), str(mountpoint), "--config", str(config),
                                 "--metrics-addr", f"127.0.0.1:{port}", "--drain", "0.2"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                env=dict(os.environ, PREPFS_RUN_DIR=str(base / "run")))
    try:
        deadline = time.monotonic() + 60
        while not ("prepfs: serving" in log.read_text(errors="replace") and (mountpoint / ".prepfs" / "stats.json").is_file()):
            assert proc.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, "prepfs did not serve within 60 s: " + log.read_text(errors="replace")
            time.sleep(0.05)

        def read_more():
            for view in ("augmented", "small"):
                root = mountpoint / "jobs" / "dash" / view
                for c in sorted(os.listdir(root)):
                    for f in sorted(os.listdir(root / c)):
                        (root / c / f).read_bytes()
            (mountpoint / "decoded" / "c0" / "s00.ppm").read_bytes()
            assert not (mountpoint / "no-such-view").exists()

        read_more()
        yield mountpoint, port, read_more
    finally:
        if _alive(proc):
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        detach(mountpoint)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass


def test_every_panel_metric_is_in_a_live_mount(scraped_mount):
    mountpoint, _, _ = scraped_mount
    exposed = set(re.findall(r"^(prepfs_\w+)", (mountpoint / ".prepfs" / "metrics").read_text(), re.M))
    named = {m for _, e in _exprs() for m in re.findall(r"\bprepfs_\w+", e)}
    missing = sorted(named - exposed)
    assert not missing, f"panels name metrics the mount does not expose: {missing}"


def _query(port, expr):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return body["data"]["result"]


def test_every_panel_returns_data_from_prometheus(scraped_mount, tmp_path):
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.skip("no prometheus binary (Debian: apt-get install prometheus); the metric names are checked "
                    "against the live mount by test_every_panel_metric_is_in_a_live_mount")
    _, metrics_port, read_more = scraped_mount
    port = _free_port()
    (tmp_path / "prometheus.yml").write_text(
        "global: { scrape_interval: 1s, evaluation_interval: 1s }\n"
        "scrape_configs:\n"
        f"  - job_name: prepfs\n    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n")
    with open(tmp_path / "prometheus.log", "wb") as log:
        server = subprocess.Popen([prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
                                   f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                                  stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, (tmp_path / "prometheus.log").read_text(errors="replace")[-3000:]
            try:
                if _query(port, 'count(up{job="prepfs"} == 1)'):
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "prometheus did not scrape the mount within 60 s"
            time.sleep(0.5)
        # Reads between scrapes, so that every rate has moved across several samples.
        for _ in range(4):
            read_more()
            time.sleep(1.5)
        empty = []
        for title, expr in _exprs():
            result = _query(port, expr.replace("$instance", ".*"))
            if not result:
                empty.append(f"{title}: {expr}")
        assert not empty, "panels whose query returned no data:\n" + "\n".join(empty)
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=20)
