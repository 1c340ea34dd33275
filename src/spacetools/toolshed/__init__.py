"""The Toolshed: serves tools to many conversations through sessions, variables and per-tool routers."""

from spacetools.toolshed.connection import DEFAULT_PROFILE, ToolsConfig, connect
from spacetools.toolshed.deployment import ToolDeployment
from spacetools.toolshed.protocol import ToolProvider, ToolSession
from spacetools.toolshed.router import ToolRouter
from spacetools.toolshed.session import SessionStore
from spacetools.toolshed.shed import Session, Toolshed

__all__ = [
    "DEFAULT_PROFILE",
    "Session",
    "SessionStore",
    "ToolDeployment",
    "ToolProvider",
    "ToolRouter",
    "ToolSession",
    "ToolsConfig",
    "Toolshed",
    "connect",
]
