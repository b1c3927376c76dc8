"""Cluster connection settings, loaded through the ``kubernetes`` package's config loaders.

``kubernetes.config`` does the hard parts (kubeconfig merging, exec credential plugins, OIDC,
client certificates, in-cluster service-account tokens and their refresh); this module turns its
``Configuration`` into what an async HTTP client and a WebSocket client need: a base URL, an
``ssl.SSLContext`` and fresh auth headers. Credentials stay inside: the repr names the kind of
credential only, and no error message quotes one.
"""

from __future__ import annotations

import base64
import ssl
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from kuber_exec_core import ExecError, ExecErrorCode

__all__ = ["ClusterConfig"]


class ClusterConfig:
    """Where the API server is and how to authenticate to it.

    Build it with :meth:`from_kubeconfig` or :meth:`in_cluster` (both block: they read files and
    may run an exec credential plugin; adapters call them in a worker thread), or directly with a
    server URL for an unauthenticated loopback server such as the sandbox.
    """

    def __init__(
        self,
        server: str,
        *,
        ssl_context: ssl.SSLContext | None = None,
        configuration: Any = None,
        credential_kind: str = "none",
        reload: Callable[[], Any] | None = None,
    ) -> None:
        parts = urlsplit(server)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ExecError(
                ExecErrorCode.INVALID, "The Kubernetes API server URL must be http(s)://host[:port]"
            )
        self.server = server.rstrip("/")
        self.ssl_context = ssl_context
        self._configuration = configuration
        self._credential_kind = credential_kind
        # Loads the credentials again from where they came from (kubeconfig: its exec plugin
        # or token file run again; in-cluster: the token file re-read); None: nothing to reload.
        self._reload = reload
        self._refresh_lock = threading.Lock()
        self._generation = 0

    def __repr__(self) -> str:
        return f"ClusterConfig(server={self.server!r}, credentials={self._credential_kind})"

    @property
    def has_credentials(self) -> bool:
        """Whether requests carry credentials (from a kubeconfig or the service account)."""
        return self._configuration is not None

    @property
    def websocket_base(self) -> str:
        """The server URL with ``ws``/``wss`` for the exec upgrade."""
        scheme, rest = self.server.split("://", 1)
        return f"{'wss' if scheme == 'https' else 'ws'}://{rest}"

    @property
    def credentials_generation(self) -> int:
        """How many times :meth:`refresh_credentials` has replaced the credentials."""
        return self._generation

    def refresh_credentials(self, seen_generation: int) -> bool:
        """Load fresh credentials now, whatever their expiry says (blocking: it may run the exec
        plugin); for a request the server answered ``401``. Only once per generation: a caller
        that saw ``seen_generation`` and finds it already replaced (another request refreshed
        meanwhile) gets ``True`` without a second reload.

        Returns ``False`` when the credentials cannot be reloaded (none, or given directly).

        Raises:
            ExecError: ``EXEC_FAILED`` when reloading fails (never quoting a credential).
        """
        if self._reload is None:
            return False
        with self._refresh_lock:
            if self._generation != seen_generation:
                return True
            try:
                configuration = self._reload()
            except ExecError:
                raise
            except Exception as error:
                raise ExecError(
                    ExecErrorCode.FAILED,
                    f"Refreshing the Kubernetes credentials failed ({type(error).__name__})",
                ) from None
            self._configuration = configuration
            self._generation += 1
            return True

    def auth_headers(self) -> list[tuple[str, str]]:
        """Current auth headers; may block (token refresh, exec plugin). Empty without auth."""
        configuration = self._configuration
        if configuration is None:
            return []
        try:
            # Calls refresh_api_key_hook first: exec plugins and OIDC tokens stay fresh.
            # kubernetes >= 30 files the token under "BearerToken"; older ones "authorization".
            token = configuration.get_api_key_with_prefix("BearerToken", alias="authorization")
        except Exception as error:
            raise ExecError(
                ExecErrorCode.FAILED,
                f"Refreshing the Kubernetes credentials failed ({type(error).__name__})",
            ) from None
        if token:
            return [("Authorization", token)]
        username, password = configuration.username, configuration.password
        if username or password:
            basic = base64.b64encode(f"{username or ''}:{password or ''}".encode()).decode()
            return [("Authorization", f"Basic {basic}")]
        return []

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, context: str | None = None) -> ClusterConfig:
        """Load ``path`` (default: ``$KUBECONFIG`` or ``~/.kube/config``), ``context`` or current.

        Raises:
            ExecError: ``EXEC_FAILED`` when the file or context cannot be loaded.
        """

        def load() -> Any:
            from kubernetes import client, config
            from kubernetes.config.config_exception import ConfigException

            configuration = client.Configuration()
            try:
                config.load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=path,
                    context=context,
                    client_configuration=configuration,
                    persist_config=False,
                )
            except (ConfigException, OSError, ValueError, TypeError) as error:
                raise ExecError(
                    ExecErrorCode.FAILED, f"Loading the kubeconfig failed: {_safe_text(error)}"
                ) from None
            return configuration

        return cls._from_configuration(load(), load)

    @classmethod
    def in_cluster(cls) -> ClusterConfig:
        """The pod's service account (token file re-read as it rotates).

        Raises:
            ExecError: ``EXEC_FAILED`` when not running in a pod.
        """

        def load() -> Any:
            from kubernetes import client, config
            from kubernetes.config.config_exception import ConfigException

            configuration = client.Configuration()
            try:
                config.load_incluster_config(  # type: ignore[no-untyped-call]
                    client_configuration=configuration
                )
            except (ConfigException, OSError) as error:
                raise ExecError(
                    ExecErrorCode.FAILED,
                    f"Loading the in-cluster configuration failed: {_safe_text(error)}",
                ) from None
            return configuration

        return cls._from_configuration(load(), load)

    @classmethod
    def _from_configuration(
        cls, configuration: Any, reload: Callable[[], Any] | None = None
    ) -> ClusterConfig:
        server: str = configuration.host
        context: ssl.SSLContext | None = None
        if server.startswith("https://"):
            context = _tls_context(configuration)
        if configuration.api_key or configuration.refresh_api_key_hook:
            kind = "token"
        elif configuration.cert_file:
            kind = "client-certificate"
        elif configuration.username or configuration.password:
            kind = "basic"
        else:
            kind = "none"
        reload = reload if kind == "token" else None  # Certificates and passwords don't expire.
        return cls(
            server,
            ssl_context=context,
            configuration=configuration,
            credential_kind=kind,
            reload=reload,
        )


class _EncryptedKeyError(Exception):
    """Raised by the pass phrase callback: an encrypted key is refused, never prompted for."""


def _refuse_pass_phrase() -> bytes:
    # Without a callback OpenSSL asks on the terminal ("Enter PEM pass phrase:") and blocks,
    # or fails with EINVAL when there is none.
    raise _EncryptedKeyError


def _field(path: str | None, name: str) -> str:
    """The kubeconfig field a loaded file came from: ``name-data`` (which the ``kubernetes``
    loader writes to a temporary file) or ``name`` (a path in the kubeconfig)."""
    try:
        from kubernetes.config import kube_config

        temporary = set(getattr(kube_config, "_temp_files", {}).values())
    except ImportError:  # pragma: no cover - the kubernetes package is a dependency
        temporary = set()
    return f"{name}-data" if path in temporary else name


def _tls_error(message: str) -> ExecError:
    return ExecError(ExecErrorCode.FAILED, f"Loading the kubeconfig failed: {message}")


def _tls_context(configuration: Any) -> ssl.SSLContext:
    """The verifying TLS context of a kubeconfig: its CA and client certificate, each error
    naming the kubeconfig field at fault (never quoting key material)."""
    ca: str | None = configuration.ssl_ca_cert or None
    try:
        # Verification is on unless the kubeconfig itself says insecure-skip-tls-verify.
        context = ssl.create_default_context(cafile=ca)
    except (ssl.SSLError, OSError, ValueError) as error:
        field = _field(ca, "certificate-authority")
        raise _tls_error(
            f"the cluster's {field} is not a usable PEM CA certificate ({_ssl_reason(error)})"
        ) from None
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    cert: str | None = configuration.cert_file or None
    key: str | None = configuration.key_file or None
    if cert:
        cert_field = _field(cert, "client-certificate")
        key_field = _field(key, "client-key") if key else cert_field
        try:
            context.load_cert_chain(cert, key, password=_refuse_pass_phrase)
        except _EncryptedKeyError:
            raise _tls_error(
                f"the user's {key_field} is encrypted; kuber-exec never prompts for a pass "
                "phrase: give it an unencrypted key"
            ) from None
        except ssl.SSLError as error:
            if error.reason == "KEY_VALUES_MISMATCH":
                detail = f"the user's {key_field} does not match its {cert_field}"
            else:
                detail = (
                    f"the user's {cert_field} and {key_field} are not a usable PEM certificate "
                    f"and key ({_ssl_reason(error)})"
                )
            raise _tls_error(detail) from None
        except (OSError, ValueError) as error:
            raise _tls_error(
                f"the user's {cert_field} or {key_field} could not be read ({_ssl_reason(error)})"
            ) from None
    return context


def _ssl_reason(error: BaseException) -> str:
    # OpenSSL's reason code (NO_CERTIFICATE_OR_CRL_FOUND, PEM_LIB...) or the OS error's text;
    # never the file's content.
    reason = getattr(error, "reason", None)
    if isinstance(reason, str) and reason:
        return reason
    return getattr(error, "strerror", None) or type(error).__name__


def _safe_text(error: BaseException) -> str:
    # Config errors name files and contexts, not secrets; still, keep them short.
    text = str(error).strip() or type(error).__name__
    return text if len(text) <= 300 else text[:300] + "…"
