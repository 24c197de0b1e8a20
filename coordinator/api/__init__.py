"""The REST API: endpoints, handlers, validation, authentication and error bodies."""
