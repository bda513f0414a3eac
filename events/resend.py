"""A command that carries its task id, sent until somebody answers it (cluster mode).

In cluster mode the VM actors run on one host, the lease holder (``events/leases.py``), and a
gateway's command reaches it over NATS. A holder that dies, or stalls, after the servers
routed a command to it answers nothing, and before this the gateway waited out the command's
whole deadline (120 s) although a survivor took over within the lease's TTL. So the command is
sent again every ``resend_every`` seconds while unanswered, with the same task id and the same
deadline; once the dead holder's subscription is gone (NATS answers "no responders"), it is
tried every ``RETRY_NO_RESPONDERS`` seconds until the next holder takes it. A command is run at
most once whatever the number of copies: the holder answers a task id it already knows (in
flight, answered, or found in the store it replayed) with that task's answer
(``actors/vm/host.py``), so a copy of an install the dead holder had begun gets the task
that survivor settles, not a second install.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from events.bus import CommandTimeout, NoResponders, deadline_headers
from events.errors import CommandFailed

log = logging.getLogger(__name__)

# A command unanswered this long is sent again (the holder answers a copy at once: it only
# says which task runs it, the work follows in the task's events).
RESEND_EVERY = 5.0
# Between two tries while no host serves the subject (a holder died, none has taken over).
RETRY_NO_RESPONDERS = 0.5


async def command_resent(
    nc: Client,
    subject: str,
    payload: dict[str, Any],
    timeout: float,
    *,
    resend_every: float = RESEND_EVERY,
) -> Any:
    """Send ``payload`` (which names its task) and return the reply, re-sending it while
    unanswered within ``timeout``. Raises like ``events.bus.command``: NoResponders when no
    host served the subject at the first try, CommandTimeout when nobody answered in time,
    CommandFailed with the handler's status for an ``{"error": ...}`` reply."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    headers = deadline_headers(timeout)  # one deadline for every copy
    data = json.dumps(payload, separators=(",", ":")).encode()
    sent = 0
    while True:
        left = deadline - loop.time()
        if left <= 0:
            raise CommandTimeout(f"no answer on {subject} within {timeout:g}s")
        if not nc.is_connected:
            # Reconnecting (its server died): the copy goes out once it is back.
            await asyncio.sleep(min(RETRY_NO_RESPONDERS, left))
            continue
        try:
            msg = await nc.request(subject, data, timeout=min(resend_every, left), headers=headers)
        except NoRespondersError:
            if not sent:
                raise NoResponders(f"no service answers on {subject}") from None
            await asyncio.sleep(min(RETRY_NO_RESPONDERS, left))
            continue
        except NatsTimeout:
            sent += 1
            log.warning(
                "no answer on %s (task %s) within %.0f s; sending it again",
                subject,
                payload.get("task"),
                resend_every * sent,
            )
            continue
        reply = json.loads(msg.data)
        if isinstance(reply, dict) and set(reply) == {"error"} and isinstance(reply["error"], dict):
            error = reply["error"]
            raise CommandFailed(int(error.get("status", 500)), str(error.get("message", "error")))
        return reply
