"""The server of this environment."""
