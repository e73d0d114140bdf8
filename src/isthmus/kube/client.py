"""lightkube AsyncClient construction, the same for real clusters and the embedded apiserver."""

from __future__ import annotations

import os
from pathlib import Path

import httpx2
from lightkube import AsyncClient, ConfigError, KubeConfig
from lightkube.config.kubeconfig import SingleConfig


class KubeConfigError(Exception):
    """The kubeconfig cannot be loaded (missing file, unknown context, no in-cluster account).

    The message is meant for users: CLIs print it and exit 2.
    """


def load_config(kubeconfig: str | os.PathLike[str] | None = None, context: str | None = None) -> SingleConfig:
    """Select the configuration to talk to one API server.

    An explicit kubeconfig path wins; otherwise the in-cluster service account, then
    `$KUBECONFIG` (first path only), then `~/.kube/config` — kubectl's order, minus merging.
    `context` picks a context of a file (default: its current-context).
    """
    try:
        if kubeconfig is not None:
            return _select(KubeConfig.from_file(Path(kubeconfig)), context, str(kubeconfig))
        if context is None:
            try:
                return _select(KubeConfig.from_service_account(), None, "in-cluster service account")
            except (ConfigError, KeyError):  # KeyError: KUBERNETES_SERVICE_HOST/PORT unset
                pass
        env = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
        path = Path(env or "~/.kube/config").expanduser()
        return _select(KubeConfig.from_file(path), context, str(path))
    except ConfigError as err:
        raise KubeConfigError(str(err)) from err
    except (OSError, ValueError, TypeError) as err:  # unreadable or malformed file
        raise KubeConfigError(f"cannot load kubeconfig: {err}") from err


def _select(conf: KubeConfig, context: str | None, where: str) -> SingleConfig:
    single = conf.get(context)
    if single is None:  # pragma: no cover - lightkube raises instead when there is no default
        raise KubeConfigError(f"{where}: no context selected")
    return single


def make_client(
    kubeconfig: str | os.PathLike[str] | None = None,
    context: str | None = None,
    *,
    namespace: str | None = None,
    field_manager: str | None = None,
    timeout: float = 30.0,
) -> AsyncClient:
    """A lightkube AsyncClient for one API server (see `load_config` for how it is chosen).

    `field_manager` becomes the default for every write (server-side apply needs one);
    `timeout` bounds each request except watches, which lightkube keeps open.
    """
    config = load_config(kubeconfig, context)
    return AsyncClient(
        config,
        namespace=namespace,
        field_manager=field_manager,
        timeout=httpx2.Timeout(timeout),
        # Proxy variables must not route loopback apiservers (the embedded default) through a proxy.
        trust_env=not _is_loopback(config.cluster.server),
    )


def _is_loopback(server: str) -> bool:
    host = httpx2.URL(server).host
    return host in ("localhost", "::1") or host.startswith("127.")
