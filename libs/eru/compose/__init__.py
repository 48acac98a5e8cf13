"""The docker-compose stack (docs/deploy.md): its fixed shape, its generated secrets and the container entrypoints.

Kept free of imports so that the containers' health checks (`python -m eru.compose health …`) start fast.
"""
