"""gem-gateway: an OpenAI-compatible chat server that turns any agent program's calls into gem episodes."""
