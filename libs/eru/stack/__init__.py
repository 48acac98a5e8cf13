"""The embedded local stack behind `eru up` / `eru down` (docs/operations.md): the state file and process helpers
(`info`), generated NATS users and credentials (`auth`), starting everything (`runner`), the restart policy
(`supervisor`) and stopping (`stop`). Kept empty so that importing one part never imports the others."""
