"""`durably dashboard`: runs, steps and actions in a browser; `/metrics` for Prometheus.

Server-rendered pages on the standard library's HTTP server. Reading is open to whoever
can reach the port (bound to 127.0.0.1 unless told otherwise); every action that changes
state needs the token, and is protected against cross-site request forgery.
"""

from ._server import Dashboard

__all__ = ["Dashboard"]
