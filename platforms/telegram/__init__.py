"""Telegram (`chatgate[telegram]`) on python-telegram-bot, imported when Telegram is configured.

The package imports nothing: `chatgate setup --help` reads its `setup` module without loading the
config model (`spec`, for the registry) or the SDK (`adapter`)."""
