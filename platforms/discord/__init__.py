"""Discord, on discord.py (`chatgate[discord]`).

The package imports nothing: `chatgate setup --help` reads its `setup` module without loading the
config model (`spec`, for the registry) or the SDK (`adapter`)."""
