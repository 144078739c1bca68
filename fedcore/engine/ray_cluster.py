"""Starting or joining the Ray cluster the Ray executor runs on; a cluster fedcore starts listens on loopback only.

Ray's default on Linux is to take the machine's external address as the node address and to bind its
servers (GCS, raylet, workers, object manager, runtime-env agent) to it, so a laptop on a café network
would expose them. :func:`start_local_cluster` binds the node to ``127.0.0.1`` unless told otherwise:
``bind="auto"`` keeps Ray's own choice (other machines can join), any other address binds there. The
dashboard stays off; asked for through ``init_kwargs``, it binds to the node address.
"""
from __future__ import annotations

from collections.abc import Iterator
import contextlib
import ipaddress
import os
import socket
from typing import Any
from urllib.parse import urlparse

from fedcore.errors import ConfigError

LOOPBACK = "127.0.0.1"

_CLUSTER_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # Ray's switch between "node = loopback" and "node = LAN address"


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fail fast, before any work, when a Ray address cannot be reached (``host:port`` or ``ray://host:port``)."""
    if address in ("auto", "local"):
        return
    parsed = urlparse(address if "://" in address else f"ray://{address}")
    host, port = parsed.hostname, parsed.port
    if not host or not port:
        raise ConfigError(f"RayExecutor.address={address!r} is not 'host:port', 'ray://host:port', 'auto' or 'local'")
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        raise ConfigError(f"RayExecutor.address={address!r}: cannot reach the Ray cluster at {host}:{port} "
                          f"({exc}); start it with `ray start --head --port={port}` or fix the address") from None


def check_bind(bind: str) -> None:
    """``bind`` is ``"auto"`` or an IP address (``127.0.0.1`` by default)."""
    if bind == "auto":
        return
    try:
        ipaddress.ip_address(bind)
    except ValueError:
        raise ConfigError(f"RayExecutor.bind={bind!r} is not an IP address or 'auto' (loopback: '127.0.0.1'; "
                          f"this machine's address for a multi-node cluster)") from None


def is_loopback(bind: str) -> bool:
    return bind != "auto" and ipaddress.ip_address(bind).is_loopback


@contextlib.contextmanager
def _node_on_loopback() -> Iterator[None]:
    """Let Ray keep ``127.0.0.1`` as the node address: on Linux it otherwise swaps a loopback node address for
    the external one. The switch is Ray's environment variable (its child processes read it) and the constant
    Ray read from it at import (this process); both are restored afterwards."""
    import ray._private.ray_constants as constants

    saved_env, saved_flag = os.environ.get(_CLUSTER_ENV), getattr(constants, "ENABLE_RAY_CLUSTER", None)
    os.environ[_CLUSTER_ENV] = "0"
    constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        if saved_env is None:
            os.environ.pop(_CLUSTER_ENV, None)
        else:
            os.environ[_CLUSTER_ENV] = saved_env
        if saved_flag is not None:
            constants.ENABLE_RAY_CLUSTER = saved_flag


def start_local_cluster(*, num_cpus: int, bind: str = LOOPBACK, **init_kwargs: Any) -> None:
    """``ray.init`` of a fresh single-node cluster whose sockets listen on ``bind`` (loopback by default)."""
    import ray

    check_bind(bind)
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "num_cpus": num_cpus, **init_kwargs}
    if bind != "auto":
        kwargs.setdefault("_node_ip_address", bind)
        if kwargs.get("include_dashboard"):
            kwargs.setdefault("dashboard_host", bind)
    with _node_on_loopback() if is_loopback(bind) else contextlib.nullcontext():
        ray.init(**kwargs)


def join_cluster(address: str, **init_kwargs: Any) -> None:
    """``ray.init(address=...)`` of an existing cluster (its nodes bound where they were started)."""
    import ray

    check_reachable(address, 5.0)
    kwargs = {"log_to_driver": False, **init_kwargs, "address": address}
    for key in ("num_cpus", "num_gpus", "include_dashboard"):
        kwargs.pop(key, None)
    ray.init(**kwargs)


def init_ray(*, address: str | None, num_cpus: int, bind: str = LOOPBACK, **init_kwargs: Any) -> bool:
    """The one way fedcore connects to Ray (``fedcore run``'s Ray executor, ``fedcore sweep --ray``): nothing when
    this process already has a Ray session, :func:`join_cluster` when the user named an ``address``, else
    :func:`start_local_cluster` on ``bind`` (loopback by default). True when this call started or joined Ray."""
    import ray

    if ray.is_initialized():
        return False
    if address:
        join_cluster(address, **init_kwargs)
    else:
        kwargs = dict(init_kwargs)
        start_local_cluster(num_cpus=kwargs.pop("num_cpus", num_cpus), bind=bind, **kwargs)
    return True


__all__ = ["LOOPBACK", "check_bind", "check_reachable", "init_ray", "is_loopback", "join_cluster",
           "start_local_cluster"]
