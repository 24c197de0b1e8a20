"""Examples of using worker_sdk against a coordinator; see examples/README.md."""
