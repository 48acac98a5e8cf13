"""The embedded local stack behind `eru up` / `eru down` (docs/operations.md): the state file and process helpers
(`info`), generated NATS users and credentials (`auth`), each process's launcher (`launch`), provisioning
(`provision`), a clustered bus (`cluster`), the restart policy (`supervisor`), when the stack is ready
(`readiness`) and stopping (`stop`). Starting and supervising everything is `eru.up.runner`, above this package and
the console. Kept empty so that importing one part never imports the others."""
