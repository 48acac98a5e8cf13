"""The node-agent service's main: started by `eru.service.run`."""

from __future__ import annotations

from eru.service import ServiceContext


async def service_main(ctx: ServiceContext) -> None:
    """Serve until the runner asks to stop."""
    ctx.ready.set()
    await ctx.stopping.wait()
