"""`eru up` itself (docs/operations.md): `runner` starts the embedded servers (`eru.embedded`), provisions and
launches the stack's processes (`eru.stack`), starts the console (`eru.console`), writes the scrape config
(`eru.observability`) and supervises everything until a signal. It sits above all of those, so none of them imports
it; the CLI (`eru up`, `eru demo`) does."""
