"""Real test servers on loopback: recipes to obtain them, processes, pytest fixtures.

``python -m tests.servers install`` obtains every server (``status`` lists the cache);
the fixtures are in ``tests.servers.fixtures``; ``NotificationSink`` receives webhooks.
"""

from tests.servers.sink import Delivery, NotificationSink
from tests.servers.tls import CertificateAuthority

__all__ = ["CertificateAuthority", "Delivery", "NotificationSink"]
