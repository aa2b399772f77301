"""Each platform says what `chatgate setup` asks of it (`platforms/<name>/setup.py`); setup and its
parser know no platform by name. A package that forgot its declaration, or named a key its config
model does not have, would only show when a person sets that platform up: checked here instead."""

from __future__ import annotations

from gateway.cli.parsers import build, commands
from platforms.registry import specs
from platforms.setup import setups


def test_every_platform_declares_what_setup_asks_of_it():
    declared, known = setups(), specs()
    assert set(declared) == set(known)
    for name, spec in known.items():
        setup = declared[name]
        assert (setup.token is None) == (spec.probe is None), name  # (the token setup asks for is the one probed)
        keys = [secret.key for secret in (setup.token, *setup.secrets) if secret is not None] + list(setup.fixed)
        assert set(keys) <= set(spec.config.model_fields), name
        assert setup.user_ids is None or setup.token is not None, name  # (an admin's id is read with the bot)


def test_the_parser_offers_each_platforms_own_options():
    parser = dict(commands(build()))[("setup",)]
    offered = {option for action in parser._actions for option in action.option_strings}
    wanted = {secret.option for setup in setups().values() for secret in setup.secrets}
    assert wanted and wanted <= offered  # (--slack-app-token, as the README and the tests give it)
