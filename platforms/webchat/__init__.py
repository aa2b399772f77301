"""The local web chat: a page and a websocket on the gateway's own HTTP server (no extra library).

The package imports nothing: `chatgate setup --help` reads its `setup` module without loading the
config model (`spec`, for the registry) or the SDK (`adapter`)."""
