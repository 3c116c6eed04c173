"""deploy/: the manifests parse and lint, and every flag, key and port they use exists in the CLI.

Nothing here runs a container: there is no Docker engine or cluster in CI. The image build is
tested only where a Docker engine answers (skipped with the reason otherwise).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy.cli import build_parser
from proxy.ops.config import config_keys, load_config
from proxy.ops.server import parse_hostport
from tests.support.paths import ROOT

DEPLOY = ROOT / "deploy"
MANIFESTS = [DEPLOY / "compose.yaml", DEPLOY / "compose.gpu.yaml", DEPLOY / "k8s" / "triton-tap.yaml"]


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    p: argparse.ArgumentParser = sub.choices[name]
    return p


RECORD = _subparser("record")


def _docs(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _k8s(kind: str) -> list[dict[str, Any]]:
    return [d for d in _docs(DEPLOY / "k8s" / "triton-tap.yaml") if d["kind"] == kind]


def _proxy_container() -> dict[str, Any]:
    (dep,) = _k8s("Deployment")
    (c,) = [c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "triton-tap"]
    return c


def _ports_of(config: dict[str, Any]) -> tuple[int, int]:
    return parse_hostport(config["listen"], "listen")[1], parse_hostport(config["metrics"], "metrics")[1]


def _flags(args: list[str]) -> list[str]:
    return [a.split("=", 1)[0] for a in args if a.startswith("--")]


def test_manifests_parse_and_pass_yamllint() -> None:
    """compose and Kubernetes files are valid YAML and yamllint-clean (deploy/.yamllint)."""
    for path in MANIFESTS:
        assert _docs(path), path
    proc = subprocess.run([sys.executable, "-m", "yamllint", "-s", "-c", str(DEPLOY / ".yamllint"), str(DEPLOY)],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_yamllint_would_catch_a_broken_manifest(tmp_path: Path) -> None:
    """Control: the same lint fails on a duplicated key."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: 1\na: 2\n")
    proc = subprocess.run([sys.executable, "-m", "yamllint", "-s", "-c", str(DEPLOY / ".yamllint"), str(bad)],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert proc.returncode != 0


def test_config_files_use_only_record_keys() -> None:
    """deploy/proxy.toml and the ConfigMap's proxy.toml load with the record config schema, and agree."""
    file_cfg = load_config(DEPLOY / "proxy.toml", RECORD)
    (cm,) = _k8s("ConfigMap")
    cm_raw = tomllib.loads(cm["data"]["proxy.toml"])
    assert set(cm_raw) <= set(config_keys(RECORD))
    assert cm_raw == tomllib.loads((DEPLOY / "proxy.toml").read_text())
    assert file_cfg["capture_dir"] == Path("/captures")


def test_flags_in_manifests_exist_in_the_cli() -> None:
    """Every --flag passed to the proxy (compose command, k8s args, Dockerfile CMD/HEALTHCHECK) is a real flag."""
    record_flags = {o for a in RECORD._actions for o in a.option_strings}
    health_flags = {o for a in _subparser("health")._actions for o in a.option_strings}
    compose = _docs(DEPLOY / "compose.yaml")[0]["services"]["proxy"]["command"]
    k8s = _proxy_container()["args"]
    docker = (DEPLOY / "Dockerfile").read_text()
    cmd = yaml.safe_load(re.search(r"^CMD (\[.*\])$", docker, re.M)[1])  # type: ignore[index]
    entry = yaml.safe_load(re.search(r"^ENTRYPOINT (\[.*\])$", docker, re.M)[1])  # type: ignore[index]
    health = yaml.safe_load(re.search(r"CMD (\[\"triton-tap\", \"health\".*\])$", docker, re.M)[1])  # type: ignore[index]
    assert entry == ["triton-tap", "record"]
    assert "exec triton-tap record" in _proxy_container()["command"][2]
    for args in (compose, k8s, cmd):
        used = _flags(args)
        assert used and set(used) <= record_flags, used
        RECORD.parse_args(args)  # values are accepted too (paths need not exist)
    assert set(_flags(health)) <= health_flags
    assert build_parser().parse_args(health[1:]).target == "127.0.0.1:8011"


def test_ports_match_the_proxy_config() -> None:
    """Ports exposed, published, probed and targeted are the listen/metrics ports of proxy.toml."""
    listen, metrics = _ports_of(tomllib.loads((DEPLOY / "proxy.toml").read_text()))
    docker = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^EXPOSE (.*)$", docker, re.M)[1].split() == [str(listen), str(metrics)]  # type: ignore[index]
    assert f"--target\", \"127.0.0.1:{listen}\"" in docker
    compose = _docs(DEPLOY / "compose.yaml")[0]["services"]
    assert compose["proxy"]["ports"] == [f"{listen}:{listen}", f"{metrics}:{metrics}"]
    # compose overrides only the upstream: Triton's gRPC port in the triton service
    assert compose["proxy"]["command"][-2:] == ["--upstream", "triton:8001"]
    c = _proxy_container()
    named = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert named == {"proxy-grpc": listen, "proxy-metrics": metrics}
    assert c["readinessProbe"]["grpc"]["port"] == listen
    assert c["livenessProbe"]["tcpSocket"]["port"] == listen
    (svc,) = _k8s("Service")
    targets = {p["name"]: p["targetPort"] for p in svc["spec"]["ports"]}
    assert targets == {"grpc": "proxy-grpc", "proxy-metrics": "proxy-metrics"}
    (dep,) = _k8s("Deployment")
    assert dep["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == str(metrics)
    # the proxy's upstream is Triton's gRPC container port in the same pod
    (triton,) = [x for x in dep["spec"]["template"]["spec"]["containers"] if x["name"] == "triton"]
    grpc_port = next(p["containerPort"] for p in triton["ports"] if p["name"] == "grpc")
    assert load_config(DEPLOY / "proxy.toml", RECORD)["upstream"] == f"127.0.0.1:{grpc_port}"


def test_dockerfile_is_slim_non_root_with_healthcheck() -> None:
    """python:*-slim base, a numeric non-root USER, a HEALTHCHECK, the proxy as ENTRYPOINT, sources exist."""
    docker = (DEPLOY / "Dockerfile").read_text()
    bases = re.findall(r"^FROM (\S+)", docker, re.M)
    assert bases and all(b.startswith("python:") and b.endswith("-slim") for b in bases)
    user = re.findall(r"^USER (\S+)", docker, re.M)
    assert user == ["10001:10001"]
    assert _proxy_container()["securityContext"]["runAsUser"] == 10001
    assert "HEALTHCHECK" in docker
    for src in re.findall(r"^COPY (?!--from)(.+) \S+$", docker, re.M):
        for part in src.split():
            assert (ROOT / part).exists(), part


def _docker_engine() -> str | None:
    if shutil.which("docker") is None:
        return "no docker client installed"
    proc = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=30, check=False)
    if proc.returncode != 0:
        return "no Docker engine answers (`docker info` failed)"
    return None


def test_image_builds() -> None:
    """`docker build -f deploy/Dockerfile .` succeeds and the image's --help is the record help."""
    reason = _docker_engine()
    if reason is not None:
        pytest.skip(reason)
    tag = "triton-tap:test"
    proc = subprocess.run(["docker", "build", "-q", "-f", str(DEPLOY / "Dockerfile"), "-t", tag, str(ROOT)],
                          capture_output=True, text=True, timeout=1800, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = subprocess.run(["docker", "run", "--rm", tag, "--help"], capture_output=True, text=True, timeout=120,
                         check=False)  # fmt: skip
    assert run.returncode == 0 and "--metrics" in run.stdout


def test_the_wheel_the_image_installs_has_the_report_template_and_models(tmp_path: Path) -> None:
    """The Dockerfile's build stage, without Docker: the same COPYs, `pip wheel .`, then the wheel's contents."""
    import zipfile

    src = tmp_path / "src"
    src.mkdir()
    docker = (DEPLOY / "Dockerfile").read_text()
    build_stage = docker.split("\nFROM ", 2)[1]
    for line in build_stage.splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            *parts, _ = line.split()[1:]
            for part in parts:
                if (ROOT / part).is_dir():
                    shutil.copytree(ROOT / part, src / part, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    shutil.copy(ROOT / part, src / part)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "w"), str(src)],
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp_path / "w").glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "replay/tools/report/template.html" in names
    assert {"proxy/lab/models/tokens/config.pbtxt", "proxy/lab/models/echo/1/model.py"} <= names
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "triton-tap = proxy.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()
    # The compiled fast paths are optional at install: a build without a C compiler succeeds without
    # them, and the proxy then runs its Python uncompiled (~2x the CPU per message). The image's build
    # stage installs one (python:slim has none), and here, where one is, every module setup.py builds
    # (replay/compiled.py's registry) is in the wheel, with the manifest saying which sources they are.
    assert "apt-get install" in build_stage and " gcc " in build_stage
    if shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0]) is not None:
        from replay.compiled import BUILD_MANIFEST, MODULES, SOURCES

        built = {n.split(".")[0].replace("/", ".") for n in names if n.endswith(".so")}
        assert {*SOURCES, *MODULES, "triton_tap__mypyc"} <= built, built
        assert f"replay/{BUILD_MANIFEST.name}" in names


def test_embedded_scripts_in_the_kubernetes_manifest_work(tmp_path: Path) -> None:
    """The init container's Python copies the example models; the sidecar's shell waits for Triton's
    port and then execs the proxy with the container's args (run here with the port and the proxy
    swapped for a local listener and `echo`)."""
    import socket

    (dep,) = _k8s("Deployment")
    (init,) = dep["spec"]["template"]["spec"]["initContainers"]
    assert init["command"][:2] == ["python", "-c"]
    code = init["command"][2]
    assert "'/models'" in code
    subprocess.run([sys.executable, "-c", code.replace("'/models'", repr(str(tmp_path / "models")))],
                   check=True, timeout=60)  # fmt: skip
    assert (tmp_path / "models" / "tokens" / "config.pbtxt").exists()
    c = _proxy_container()
    assert c["command"][:2] == ["sh", "-c"] and "8001" in c["command"][2]
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        script = c["command"][2].replace("8001", str(port)).replace("exec triton-tap record", "exec echo record")
        script = script.replace("python -c", f"{sys.executable} -c")
        proc = subprocess.run(["sh", "-c", script, *c["command"][3:], *c["args"]], capture_output=True, text=True,
                              timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["record", *c["args"]]
