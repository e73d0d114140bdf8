"""Why a discovery agent does not start, or stops: user errors, shown as they are (`isthmus agent`)."""

from __future__ import annotations

__all__ = ["AgentConfigError", "AgentNotJoined", "BrokerCredentialsRejected"]


class AgentConfigError(Exception):
    """The cluster joined under another ID, or its broker Secret is unusable: a user error, shown as is."""


class BrokerCredentialsRejected(AgentConfigError):
    """The broker answers 401 to this cluster's token: `isthmus leave` revoked it, or a re-join made
    a new ServiceAccount. The agent stops so that its restart reads the Secret join wrote again."""


class AgentNotJoined(AgentConfigError):
    """The cluster has not joined (yet): `isthmus agent` waits for `isthmus join`."""
