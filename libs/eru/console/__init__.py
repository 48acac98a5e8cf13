"""The live web console (`eru console`, served by `eru up`): pages over the same bus queries and events as the CLI,
updated live by server-sent events. See docs/console.md."""
