"""eru: an event-driven container orchestrator."""

__version__ = "0.1.0"
