"""The eru allocator service."""
