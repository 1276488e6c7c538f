"""The only code that touches the outside world: providers, operators, the Temporal client."""
