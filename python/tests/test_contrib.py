"""contrib/ checked (issue 54): the systemd unit that `make install` puts in place, the
Kubernetes DaemonSet (a schema validator, and `prepfs check` of its config), and the Grafana
dashboard against a real Prometheus server scraping a live mount.

- The DaemonSet is validated with kubernetes-validate (`pip install kubernetes-validate`:
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
DASHBOARD = CONTRIB / "grafana" / "prepfs.json"


# ---------------------------------------------------------------------------------------------
# make install: the systemd unit


def test_make_install_puts_the_systemd_unit_in_place(tmp_path):
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
    subprocess.run(args + ["uninstall"], check=True, timeout=60, stdout=subprocess.DEVNULL)
    left = [str(p.relative_to(stage)) for p in stage.rglob("*") if not p.is_dir()]
    assert left == [], left


# ---------------------------------------------------------------------------------------------
# Kubernetes


def _documents():
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed")
    return list(yaml.safe_load_all(DAEMONSET.read_text()))


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
