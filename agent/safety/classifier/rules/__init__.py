"""The classifier's rules, one module per category; `registry` files them by command name."""
