"""The cluster is chosen as kubectl chooses it (tools/client.py): a `KUBECONFIG` list merged as kubectl merges it,
a context picked by name, in-cluster config from a pod's service account; and the errors name what is wrong.

Every kubeconfig here points at a served simulator, and every client is proven by a request: environment
"seeded" has namespace `shop`, environment "other" has none, environment "shop" runs the shop app, and the bare
paths (in-cluster config has no path prefix) are environment "default", served over HTTPS with a CA of the test's
own.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes.client import ApiClient, CoreV1Api
from sim_fixtures import SEEDED_ENV, seed
from typer.testing import CliRunner, Result

from agent_sre.cli import app
from agent_sre.config import get_settings
from agent_sre.simulator.cluster import Cluster
from agent_sre.simulator.server import SimulatorServer, write_kubeconfig
from agent_sre.simulator.simulator import Simulator
from agent_sre.tools import client as kube_client
from agent_sre.tools.client import KubeconfigError, api_client


@pytest.fixture(scope="module")
def simulator() -> Simulator:
    simulator = Simulator()
    seed(simulator, SEEDED_ENV)
    seed(simulator, "default")
    simulator.add_env(Cluster("other"))
    simulator.create_env("shop", apps=["shop"])
    return simulator


@pytest.fixture(scope="module")
def server(simulator: Simulator) -> Iterator[SimulatorServer]:
    with SimulatorServer(simulator) as server:
        yield server


@pytest.fixture
def settings_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """Environment variables for settings, read afresh by the code under test and forgotten after."""
    get_settings.cache_clear()
    yield monkeypatch
    monkeypatch.undo()
    get_settings.cache_clear()


def namespaces(api: ApiClient) -> set[str]:
    return {ns.metadata.name for ns in CoreV1Api(api).list_namespace().items}


def kubeconfig(server: SimulatorServer, path: Path, env: str) -> Path:
    return write_kubeconfig(path, f"{server.url}/envs/{env}", f"sim-{env}")


def test_a_kubeconfig_list_merges_as_kubectl_merges_it(server: SimulatorServer, tmp_path: Path) -> None:
    first, second = kubeconfig(server, tmp_path / "a", SEEDED_ENV), kubeconfig(server, tmp_path / "b", "other")
    listed = os.pathsep.join([str(first), str(tmp_path / "absent"), str(second)])
    kubectl = subprocess.run(["kubectl", "config", "current-context"], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "KUBECONFIG": listed, "HOME": str(tmp_path)}, check=True)
    assert kubectl.stdout.strip() == "sim-seeded"  # both files set one: the first wins, and the client agrees
    assert "shop" in namespaces(api_client(listed))
    assert "shop" not in namespaces(api_client(listed, context="sim-other"))  # the second file's context


def test_kubeconfig_and_context_come_from_the_settings(server: SimulatorServer, tmp_path: Path,
                                                       settings_env: pytest.MonkeyPatch) -> None:
    first, second = kubeconfig(server, tmp_path / "a", SEEDED_ENV), kubeconfig(server, tmp_path / "b", "other")
    settings_env.setenv("KUBECONFIG", os.pathsep.join([str(first), str(second)]))
    settings_env.setenv("AGENT_SRE_KUBE_CONTEXT", "sim-other")
    assert "shop" not in namespaces(api_client())
    assert "shop" in namespaces(api_client(context="sim-seeded"))  # an explicit context beats the setting
    assert "shop" in namespaces(api_client(server.url + f"/envs/{SEEDED_ENV}"))  # a URL has no contexts


def test_an_unknown_context_is_refused_with_the_known_ones(server: SimulatorServer, tmp_path: Path) -> None:
    first, second = kubeconfig(server, tmp_path / "a", SEEDED_ENV), kubeconfig(server, tmp_path / "b", "other")
    with pytest.raises(KubeconfigError, match="has no context 'prod'; its contexts: sim-seeded, sim-other"):
        api_client(os.pathsep.join([str(first), str(second)]), context="prod")


def test_missing_kubeconfigs_are_named(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError, match=f"kubeconfig {tmp_path / 'a'} does not exist"):
        api_client(tmp_path / "a")
    with pytest.raises(KubeconfigError, match="none of its files exists"):
        api_client(os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")]))


def test_a_context_without_a_kubeconfig_is_refused(settings_env: pytest.MonkeyPatch) -> None:
    settings_env.setenv("AGENT_SRE_KUBE_CONTEXT", "prod")
    with pytest.raises(KubeconfigError, match="no kubeconfig to take it from"):
        api_client()


def test_the_scenarios_cli_takes_a_context(server: SimulatorServer, tmp_path: Path) -> None:
    """`--context` picks the environment running the shop, out of a list whose current context does not."""
    listed = os.pathsep.join([str(kubeconfig(server, tmp_path / "a", SEEDED_ENV)),
                              str(kubeconfig(server, tmp_path / "b", "shop"))])
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text("name: ctx-policy\napp: shop\nfault: network_policy_deny\ntarget: payment\n")

    def inject(context: str) -> Result:
        return CliRunner().invoke(app, ["scenarios", "inject", str(scenario), "--kubeconfig", listed,
                                        "--context", context])

    refused = inject("prod")
    assert refused.exit_code == 1 and "has no context 'prod'; its contexts: sim-seeded, sim-shop" in \
        " ".join(refused.output.split())
    assert inject("sim-shop").exit_code == 0
    server.simulator.env("shop").get("networkpolicies.networking.k8s.io", "shop", "payment-allow-monitoring-only")


def test_the_worker_acts_on_the_cluster_its_flags_name(server: SimulatorServer, tmp_path: Path) -> None:
    """`agent-sre worker --kubeconfig --context`: an unknown context stops it at start-up with the known ones; a
    known one becomes the cluster of the settings the worker hands its activities."""
    from agent_sre.cli.worker import _with_cluster

    listed = os.pathsep.join([str(kubeconfig(server, tmp_path / "a", SEEDED_ENV)),
                              str(kubeconfig(server, tmp_path / "b", "shop"))])
    refused = CliRunner().invoke(app, ["worker", "--kubeconfig", listed, "--context", "prod"])
    assert refused.exit_code == 1 and "has no context 'prod'; its contexts: sim-seeded, sim-shop" in \
        " ".join(refused.output.split())
    chosen = _with_cluster(get_settings(), listed, "sim-shop")
    assert (str(chosen.kubeconfig), chosen.kube_context) == (listed, "sim-shop")
    assert "shop" in namespaces(api_client(settings=chosen))
    assert _with_cluster(get_settings(), None, None) == get_settings()


def _serving_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key: the apiserver's, and the CA a pod is given."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = directory / "ca.crt", directory / "server.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


@pytest.fixture
def pod(simulator: Simulator, tmp_path: Path, settings_env: pytest.MonkeyPatch) -> Iterator[Path]:
    """What a pod sees: KUBERNETES_SERVICE_HOST/PORT of an HTTPS apiserver, and a service-account directory
    with its token and CA. Yields that directory."""
    account = tmp_path / "serviceaccount"
    account.mkdir()
    cert, key = _serving_certificate(account)
    (account / "token").write_text("pod-token")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    with SimulatorServer(simulator, ssl_context=tls) as server:
        settings_env.setattr(kube_client, "SERVICE_ACCOUNT_DIR", account)
        settings_env.setenv("KUBERNETES_SERVICE_HOST", server.host)
        settings_env.setenv("KUBERNETES_SERVICE_PORT", str(server.port))
        yield account


def test_in_cluster_config_uses_the_pods_service_account(pod: Path, settings_env: pytest.MonkeyPatch) -> None:
    settings_env.setenv("AGENT_SRE_KUBE_IN_CLUSTER", "true")
    api = api_client()
    assert api.configuration.auth_settings()["BearerToken"]["value"] == "bearer pod-token"
    assert "shop" in namespaces(api)  # over TLS, verified against the mounted CA


def test_in_cluster_config_is_never_guessed(pod: Path) -> None:
    """A pod running the tests or the dev stack has a token too: without the setting, the simulator it is."""
    assert api_client().configuration.host == get_settings().sim_url


def test_in_cluster_config_without_a_service_account_says_so(settings_env: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    settings_env.setenv("AGENT_SRE_KUBE_IN_CLUSTER", "true")
    settings_env.setattr(kube_client, "SERVICE_ACCOUNT_DIR", tmp_path)
    settings_env.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    settings_env.setenv("KUBERNETES_SERVICE_PORT", "6443")
    with pytest.raises(KubeconfigError, match="AGENT_SRE_KUBE_IN_CLUSTER is set, but .* token file does not exist"):
        api_client()
