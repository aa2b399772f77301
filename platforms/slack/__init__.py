"""Slack, on slack-bolt (`chatgate[slack]`): Socket Mode or signed HTTP events.

The package imports nothing: `chatgate setup --help` reads its `setup` module without loading the
config model (`spec`, for the registry) or the SDK (`adapter`)."""
