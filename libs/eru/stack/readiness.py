"""When `eru up` may say "eru is up", and what it says instead (docs/operations.md "Ready, or why not").

Every service replica serves `/readyz` on its loopback health port (eru.service): 200 once it is ready. The
supervisor asks each replica that has not been ready since its start, every round, and reports success only once
every process is ready. A replica that exits before it is ready three times in a row is crash-looping
(eru.stack.supervisor.crash_loop): `eru up` then fails naming it and the last line of its output file
(`logs/<name>.out`, where an interpreter's traceback or a bad setting's one line goes), and `eru status` shows it.
"""

from __future__ import annotations

import http.client
from collections.abc import Callable
from urllib.parse import urlsplit

from eru.stack.info import StackError, last_error_line
from eru.stack.supervisor import Child, RestartPolicy, Startup, crash_loop

# How long `eru up` waits for every process to be ready (`--ready-timeout`): a stack of thousands of sim nodes
# registers them all before its node agents are ready.
READY_SECONDS = 300.0


class StackNotReady(StackError):
    """The stack started but a process of it is crash-looping or not ready in time (exit 1, docs/cli.md)."""

    code = "stack_not_ready"


def http_ready(metrics_url: str, timeout: float = 1.0) -> Callable[[], bool]:
    """A probe of the replica serving `metrics_url` (`http://127.0.0.1:<port>/metrics`): True when its `/readyz`
    answers 200. Plain http.client to loopback: no proxy setting of the environment applies."""
    parts = urlsplit(metrics_url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80

    def probe() -> bool:
        connection = http.client.HTTPConnection(host, port, timeout=timeout)
        try:
            connection.request("GET", "/readyz")
            return connection.getresponse().status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            connection.close()

    return probe


def last_error(child: Child) -> str:
    """The last line `child` printed in its latest run (its output file), else the last one of an earlier run."""
    if child.output is None:
        return ""
    return last_error_line(child.output, child.output_from) or last_error_line(child.output) or ""


def crash_report(children: list[Child], policy: RestartPolicy) -> dict[str, dict[str, str]]:
    """stack.json's `crash_loops`: every crash-looping child → why, and its last error line."""
    report = {}
    for child in children:
        reason = crash_loop(child, policy)
        if reason is not None:
            report[child.name] = {"reason": reason, "last_error": last_error(child)}
    return report


def failure_message(state: Startup, children: list[Child], *, timed_out: float | None = None) -> str:
    """Why the stack is not up: each crash-looping process with its last error line, or (after `timed_out` seconds)
    the processes still not ready. Names the command that shows the rest."""
    by_name = {child.name: child for child in children}
    lines = []
    for name, reason in state.looping.items():
        error = last_error(by_name[name])
        lines.append(f"{name} is crash-looping: {reason}" + (f"; last error: {error}" if error else ""))
    if not lines and timed_out is not None:
        lines.append(f"not ready within {timed_out:g} s: {', '.join(state.waiting)}")
    first = next(iter(state.looping), None) or (state.waiting[0] if state.waiting else "supervisor")
    lines.append(f"see `eru logs {first}` and `eru status`")
    return "the stack did not come up: " + "\n".join(lines)
