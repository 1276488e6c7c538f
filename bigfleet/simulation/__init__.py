"""`bigfleet simulate`: the real engine against simulated providers, in virtual time."""
