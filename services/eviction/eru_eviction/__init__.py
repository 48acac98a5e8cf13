"""The eru eviction service."""
