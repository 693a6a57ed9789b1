"""The broker-overlay systems of the reference papers, as sans-IO cores."""
