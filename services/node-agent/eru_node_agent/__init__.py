"""The eru node-agent service."""
