"""The eru distributor service."""
