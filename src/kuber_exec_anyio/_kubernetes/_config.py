"""Cluster connection settings: a base URL, an ``ssl.SSLContext`` and fresh auth headers.

A kubeconfig whose user has a certificate, a token (or token file) or a password is read here
(:mod:`._kubeconfig`): no ``kubernetes`` import, which costs about 200 ms. A user with an
``exec`` credential plugin or an ``auth-provider`` (OIDC, cloud providers), and the in-cluster
service account, go through the ``kubernetes`` package's config loaders, which do those hard
parts (plugins, token refresh) with full fidelity; its ``Configuration`` is turned into the same
three things. Credentials stay inside: the repr names the kind of credential only, and no error
message quotes one.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
import tempfile
import threading
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from kuber_exec_core import ExecError, ExecErrorCode

from ._kubeconfig import Kubeconfig, read_kubeconfig

__all__ = ["ClusterConfig", "StaticCredentials"]


class StaticCredentials:
    """A kubeconfig user's credentials read here: a bearer token, a password, or a client
    certificate (in the TLS context, no header). The repr names the kind only."""

    def __init__(self, kind: str, headers: list[tuple[str, str]]) -> None:
        self.kind = kind
        self._headers = headers

    def __repr__(self) -> str:
        return f"StaticCredentials({self.kind})"

    def headers(self) -> list[tuple[str, str]]:
        """The auth headers to send (a copy)."""
        return list(self._headers)


def _static_credentials(kubeconfig: Kubeconfig) -> StaticCredentials:
    """The user's credentials. A ``tokenFile`` is read now and preferred over ``token``, as
    client-go does (the file is the one a rotation rewrites); ``client-certificate`` alone
    makes no header."""
    user = kubeconfig.user
    token: str | None = user.get("token") or None
    token_file: str | None = user.get("tokenFile") or None
    if token_file:
        try:
            with open(token_file, encoding="utf-8") as handle:
                token = handle.read().strip()
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or type(error).__name__
            raise ExecError(
                ExecErrorCode.FAILED,
                f"Loading the kubeconfig failed: {kubeconfig.described}: the user's tokenFile "
                f"{token_file} cannot be read ({reason})",
            ) from None
    if token:
        return StaticCredentials("token", [("Authorization", f"Bearer {token}")])
    username, password = user.get("username"), user.get("password")
    if username or password:
        basic = base64.b64encode(f"{username or ''}:{password or ''}".encode()).decode()
        return StaticCredentials("basic", [("Authorization", f"Basic {basic}")])
    if user.get("client-certificate") or user.get("client-certificate-data"):
        return StaticCredentials("client-certificate", [])
    return StaticCredentials("none", [])


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
    def auth_headers_may_block(self) -> bool:
        """Whether :meth:`auth_headers` may block (a token refresh or a plugin run: callers on
        an event loop use a worker thread); not for credentials read from a kubeconfig here."""
        return not isinstance(self._configuration, StaticCredentials)

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
        if isinstance(configuration, StaticCredentials):
            return configuration.headers()
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
        """Load ``path`` (default: each file of ``$KUBECONFIG``, merged, or ``~/.kube/config``),
        ``context`` or the current one.

        Raises:
            ExecError: ``EXEC_FAILED`` naming the file and the problem (a missing file, YAML
                that does not parse with its line and column, a field of the wrong type, an
                unknown context, unusable TLS material, a failing credential plugin).
        """
        kubeconfig = read_kubeconfig(path, context)
        if kubeconfig.needs_official_loader:
            return cls._from_official_kubeconfig(path, kubeconfig.context)

        def reload() -> StaticCredentials:
            return _static_credentials(read_kubeconfig(path, context))

        credentials = _static_credentials(kubeconfig)
        server = kubeconfig.cluster["server"]
        tls = _kubeconfig_tls(kubeconfig) if server.startswith("https://") else None
        return cls(
            server,
            ssl_context=tls,
            configuration=credentials if credentials.kind != "none" else None,
            credential_kind=credentials.kind,
            # Certificates and passwords don't expire; a token may be rewritten in its file.
            reload=reload if credentials.kind == "token" else None,
        )

    @classmethod
    def _from_official_kubeconfig(cls, path: str | None, context: str) -> ClusterConfig:
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
            except (ConfigException, OSError) as error:
                raise ExecError(
                    ExecErrorCode.FAILED, f"Loading the kubeconfig failed: {_safe_text(error)}"
                ) from None
            except Exception as error:
                # The loader's own failures on a malformed exec or auth-provider entry (a
                # TypeError, a KeyError...): named by type, their text may quote a value.
                raise ExecError(
                    ExecErrorCode.FAILED,
                    f"Loading the kubeconfig failed: the user's exec or auth-provider entry "
                    f"could not be used ({type(error).__name__})",
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
    """The verifying TLS context of the ``kubernetes`` package's ``Configuration``."""
    ca: str | None = configuration.ssl_ca_cert or None
    cert: str | None = configuration.cert_file or None
    key: str | None = configuration.key_file or None
    return _verifying_context(
        ca_file=ca,
        ca_field=_field(ca, "certificate-authority"),
        verify=bool(configuration.verify_ssl),
        cert_file=cert,
        key_file=key,
        cert_field=_field(cert, "client-certificate"),
        key_field=_field(key, "client-key") if key else _field(cert, "client-certificate"),
    )


def _kubeconfig_tls(kubeconfig: Kubeconfig) -> ssl.SSLContext:
    """The verifying TLS context of a kubeconfig read here: ``*-data`` fields are decoded in
    memory (the CA) or written to a private temporary file for the time of the load (the
    client certificate and key: ``load_cert_chain`` reads files only)."""
    cluster, user = kubeconfig.cluster, kubeconfig.user
    ca_data = _decoded(cluster, "certificate-authority-data", kubeconfig)
    verify = not _flag(cluster, "insecure-skip-tls-verify", kubeconfig)
    cert_data = _decoded(user, "client-certificate-data", kubeconfig)
    key_data = _decoded(user, "client-key-data", kubeconfig)
    cert_field = "client-certificate-data" if cert_data else "client-certificate"
    key_field = "client-key-data" if key_data else "client-key"
    with tempfile.TemporaryDirectory(prefix="kuber-exec-tls-") as directory:
        cert_file: str | None = user.get("client-certificate") or None
        key_file: str | None = user.get("client-key") or None
        if cert_data:
            cert_file = _private_file(directory, "client.crt", cert_data)
        if key_data:
            key_file = _private_file(directory, "client.key", key_data)
        if key_file is None:
            key_field = cert_field
        return _verifying_context(
            ca_file=None if ca_data else (cluster.get("certificate-authority") or None),
            ca_data=ca_data,
            ca_field=(
                "certificate-authority-data" if ca_data is not None else "certificate-authority"
            ),
            verify=verify,
            cert_file=cert_file,
            key_file=key_file,
            cert_field=cert_field,
            key_field=key_field,
        )


def _private_file(directory: str, name: str, data: bytes) -> str:
    path = os.path.join(directory, name)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)
    return path


def _decoded(entry: Mapping[str, Any], key: str, kubeconfig: Kubeconfig) -> bytes | None:
    value = entry.get(key)
    if not value:
        return None
    if not isinstance(value, str):
        raise _tls_error(f"{kubeconfig.described}: {key} must be a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        # Never the value: it may be a private key.
        raise _tls_error(f"{kubeconfig.described}: {key} is not valid base64") from None


def _flag(entry: Mapping[str, Any], key: str, kubeconfig: Kubeconfig) -> bool:
    value = entry.get(key, False)
    if not isinstance(value, bool):
        raise _tls_error(f"{kubeconfig.described}: {key} must be true or false")
    return value


def _verifying_context(
    *,
    ca_file: str | None,
    ca_field: str,
    verify: bool,
    cert_file: str | None,
    key_file: str | None,
    cert_field: str,
    key_field: str,
    ca_data: bytes | None = None,
) -> ssl.SSLContext:
    """A client context verifying the server (unless ``verify`` is off: the kubeconfig's own
    ``insecure-skip-tls-verify``) with the given CA and client certificate, each error naming
    the kubeconfig field at fault (never quoting key material)."""
    try:
        cadata = ca_data.decode("ascii") if ca_data is not None else None
        context = ssl.create_default_context(cafile=ca_file, cadata=cadata)
    except (ssl.SSLError, OSError, ValueError) as error:
        raise _tls_error(
            f"the cluster's {ca_field} is not a usable PEM CA certificate ({_ssl_reason(error)})"
        ) from None
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert_file:
        try:
            context.load_cert_chain(cert_file, key_file, password=_refuse_pass_phrase)
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
