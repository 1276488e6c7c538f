"""Process entry points: workers against any Temporal server, and `bigfleet dev`."""
