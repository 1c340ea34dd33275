"""The Toolshed: serves tools to many conversations through sessions, variables and per-tool routers."""

from spacetools.toolshed.deployment import ToolDeployment
from spacetools.toolshed.router import ToolRouter
from spacetools.toolshed.session import SessionStore
from spacetools.toolshed.shed import PROFILES, Session, Toolshed

__all__ = ["PROFILES", "Session", "SessionStore", "ToolDeployment", "ToolRouter", "Toolshed"]
