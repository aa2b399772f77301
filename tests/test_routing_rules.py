"""Unit tests for the routing rules: session keys, command parsing, access decisions."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.access import policy
from gateway.access.policy import is_admin
from gateway.chat.command_handlers import REGISTRY
from gateway.chat.commands import Command
from gateway.chat.session_key import session_key
from gateway.config import AccessConfig, load_config
from platforms.base import InboundMessage
from platforms.webchat.adapter import WebChatAdapter


def msg(platform: str = "telegram", chat_id: str = "100", chat_type: str = "dm", user_id: str = "1",
        text: str = "hi", thread_id: str | None = None, bot_mentioned: bool = False) -> InboundMessage:
    return InboundMessage(platform=platform, chat_id=chat_id, chat_type=chat_type,  # type: ignore[arg-type]
                          user_id=user_id, text=text, message_id="m1", thread_id=thread_id,
                          bot_mentioned=bot_mentioned)


# --------------------------------------------------------------------------- session keys


def test_dm_is_one_session_per_chat() -> None:
    assert session_key(msg(chat_id="100", user_id="1")) == "telegram:100"
    # the group setting does not change DMs
    assert session_key(msg(chat_id="100", user_id="1"), "shared") == "telegram:100"
    assert session_key(msg(chat_id="100"), "per_user") != session_key(msg(chat_id="200"), "per_user")


def test_group_is_per_user_by_default() -> None:
    a = session_key(msg(chat_id="-5", chat_type="group", user_id="1"))
    b = session_key(msg(chat_id="-5", chat_type="group", user_id="2"))
    assert a == "telegram:-5:user:1"
    assert b == "telegram:-5:user:2"
    assert session_key(msg(chat_id="-5", chat_type="group", user_id="1"), "per_user") == a


def test_group_shared_when_configured() -> None:
    a = session_key(msg(chat_id="-5", chat_type="group", user_id="1"), "shared")
    b = session_key(msg(chat_id="-5", chat_type="group", user_id="2"), "shared")
    assert a == b == "telegram:-5"


def test_channel_follows_the_group_rule() -> None:
    assert session_key(msg(chat_id="C9", chat_type="channel", user_id="7")) == "telegram:C9:user:7"
    assert session_key(msg(chat_id="C9", chat_type="channel", user_id="7"), "shared") == "telegram:C9"


@pytest.mark.parametrize("group_sessions", ["per_user", "shared"])
def test_thread_is_its_own_session_shared_by_participants(group_sessions: str) -> None:
    a = session_key(msg(platform="slack", chat_id="C1", chat_type="group", user_id="U1", thread_id="171.5"),
                    group_sessions)
    b = session_key(msg(platform="slack", chat_id="C1", chat_type="group", user_id="U2", thread_id="171.5"),
                    group_sessions)
    assert a == b == "slack:C1:thread:171.5"
    # another thread, or the channel itself, is another session
    other = session_key(msg(platform="slack", chat_id="C1", chat_type="group", user_id="U1", thread_id="172.0"),
                        group_sessions)
    main = session_key(msg(platform="slack", chat_id="C1", chat_type="group", user_id="U1"), group_sessions)
    assert len({a, other, main}) == 3


def test_topic_in_a_dm_is_its_own_session() -> None:
    assert session_key(msg(chat_id="100", thread_id="7")) == "telegram:100:thread:7"
    assert session_key(msg(chat_id="100", thread_id="7")) != session_key(msg(chat_id="100"))


def test_same_chat_id_on_two_platforms_is_two_sessions() -> None:
    assert session_key(msg(platform="telegram", chat_id="5")) != session_key(msg(platform="discord", chat_id="5"))


def test_empty_thread_id_is_no_thread() -> None:
    assert session_key(msg(chat_id="100", thread_id="")) == "telegram:100"


# --------------------------------------------------------------------------- commands


@pytest.mark.parametrize(
    ("text", "name", "args"),
    [
        ("/new", "new", ""),
        ("/reset", "reset", ""),
        ("/stop", "stop", ""),
        ("/status   ", "status", ""),
        ("/help@MyChatBot", "help", ""),
        ("/STOP", "stop", ""),
        ("/Status@MyBot", "status", ""),
        ("/approve 12", "approve", "12"),
        ("/deny 3 too risky", "deny", "3 too risky"),
        ("/deny@my_bot 3   not now  ", "deny", "3   not now"),
        ("/deny\nbecause I said so", "deny", "because I said so"),
        ("/deny 3\nbecause", "deny", "3\nbecause"),
        ("/new\tplease", "new", "please"),
        ("/stop\n", "stop", ""),
        ("/frobnicate now", "frobnicate", "now"),
    ],
)
def test_commands_are_parsed(text: str, name: str, args: str) -> None:
    assert REGISTRY.parse(text) == Command(name, args)


@pytest.mark.parametrize(
    "text",
    ["", "/", "/ ", "/ new", "//new", "hello /new", " /new", "/usr/bin/python3 -V", "/etc/hosts",
     "/@bot", "/\nnew", "new", "\\new"],
)
def test_not_commands(text: str) -> None:
    assert REGISTRY.parse(text) is None


def test_known_and_immediate_flags() -> None:
    for name in ("stop", "status", "help", "approve", "deny", "cron", "usage", "goal", "subgoal", "task"):
        command = REGISTRY.parse(f"/{name}")
        assert command is not None and command.known and command.immediate, name
    for name in ("new", "reset"):
        command = REGISTRY.parse(f"/{name}")
        assert command is not None and command.known and not command.immediate, name
    unknown = REGISTRY.parse("/frobnicate")
    assert unknown is not None
    assert not unknown.known
    assert unknown.immediate  # answered at once with the help text, never queued behind a turn
    assert set(REGISTRY.menu()) == {"new", "reset", "stop", "status", "approve", "deny", "cron", "usage", "goal",
                                    "subgoal", "task", "help"}


def test_stopping_and_answering_are_never_throttled() -> None:
    """The refusal rule reads the parsed command: /stop, /approve and /deny are never refused for the
    command limit; every other command (and an unknown one) counts toward it."""
    unthrottled = {name for name in REGISTRY.menu() if not REGISTRY.named(name).throttled}
    assert unthrottled == {"stop", "approve", "deny"}
    unknown = REGISTRY.parse("/frobnicate")
    assert unknown is not None and unknown.throttled


def test_a_name_is_registered_once() -> None:
    with pytest.raises(ValueError, match="/stop is registered twice"):
        REGISTRY.alias("stop", "new", "again")


def test_help_text_lists_every_command() -> None:
    text = REGISTRY.help_text()
    assert text.startswith("Commands:\n")
    for name, what in REGISTRY.menu().items():
        assert f"/{name} — {what}" in text
    assert len(text.splitlines()) == len(REGISTRY.menu()) + 1


def test_unknown_text_names_the_command_and_helps() -> None:
    text = REGISTRY.unknown_text(Command("frobnicate", ""))
    assert text.startswith("Unknown command /frobnicate. Commands:\n")
    assert "/stop — " in text


# --------------------------------------------------------------------------- access


# what the runner derives from the adapters it runs: the platforms that declare a local surface
LOCAL = frozenset(adapter.name for adapter in [WebChatAdapter] if adapter.capabilities.local)


def check_access(m: InboundMessage, rules: AccessConfig, **kwargs) -> policy.Decision:
    return policy.check_access(m, rules, local=LOCAL, **kwargs)


def access(**kwargs) -> AccessConfig:
    return AccessConfig(**kwargs)


@pytest.mark.parametrize("policy", ["pairing", "allowlist", "open"])
@pytest.mark.parametrize("chat_type", ["dm", "group"])
def test_webchat_is_always_allowed(policy: str, chat_type: str) -> None:
    m = msg(platform="webchat", chat_type=chat_type, user_id="anyone")
    assert check_access(m, access(dm_policy=policy)) == "allow"
    assert check_access(m, access(dm_policy=policy), require_mention=True) == "allow"


@pytest.mark.parametrize(("policy", "decision"), [("pairing", "pair"), ("allowlist", "ignore"), ("open", "allow")])
def test_unknown_user_in_a_dm_follows_dm_policy(policy: str, decision: str) -> None:
    assert check_access(msg(user_id="999"), access(dm_policy=policy)) == decision


@pytest.mark.parametrize("policy", ["pairing", "allowlist", "open"])
def test_known_users_are_allowed_in_a_dm(policy: str) -> None:
    rules = access(dm_policy=policy, allowed_users={"telegram": ["1"]}, admins={"telegram": ["2"]})
    assert check_access(msg(user_id="1"), rules) == "allow"  # allowlisted
    assert check_access(msg(user_id="2"), rules) == "allow"  # admin
    assert check_access(msg(user_id="3"), rules, paired=True) == "allow"  # approved by pairing


def test_allowlist_is_per_platform() -> None:
    rules = access(dm_policy="allowlist", allowed_users={"telegram": ["1"]}, admins={"telegram": ["2"]})
    assert check_access(msg(platform="discord", user_id="1"), rules) == "ignore"
    assert check_access(msg(platform="discord", user_id="2"), rules) == "ignore"
    assert is_admin(rules, "telegram", "2") is True
    assert is_admin(rules, "discord", "2") is False
    assert is_admin(rules, "telegram", "1") is False


@pytest.mark.parametrize("policy", ["pairing", "allowlist", "open"])
def test_group_without_mention_is_ignored_even_for_admins(policy: str) -> None:
    rules = access(dm_policy=policy, allowed_users={"telegram": ["1"]}, admins={"telegram": ["2"]})
    for user in ("1", "2", "3"):
        assert check_access(msg(chat_type="group", chat_id="-5", user_id=user), rules) == "ignore"
        assert check_access(msg(chat_type="channel", chat_id="-5", user_id=user), rules) == "ignore"


def test_group_with_mention() -> None:
    rules = access(dm_policy="pairing", allowed_users={"telegram": ["1"]})
    mentioned = dict(chat_type="group", chat_id="-5", bot_mentioned=True)
    assert check_access(msg(user_id="1", **mentioned), rules) == "allow"
    assert check_access(msg(user_id="3", **mentioned), rules, paired=True) == "allow"
    # pairing happens only in a DM: an unknown user in a group is ignored, not sent a code
    assert check_access(msg(user_id="3", **mentioned), rules) == "ignore"
    assert check_access(msg(user_id="3", **mentioned), access(dm_policy="allowlist")) == "ignore"
    assert check_access(msg(user_id="3", **mentioned), access(dm_policy="open")) == "allow"


def test_group_that_needs_no_mention() -> None:
    rules = access(dm_policy="pairing", allowed_users={"telegram": ["1"]})
    plain = dict(chat_type="group", chat_id="-5", bot_mentioned=False)
    assert check_access(msg(user_id="1", **plain), rules, require_mention=False) == "allow"
    assert check_access(msg(user_id="3", **plain), rules, require_mention=False) == "ignore"
    assert check_access(msg(user_id="3", **plain), access(dm_policy="open"), require_mention=False) == "allow"


def test_dm_never_needs_a_mention() -> None:
    rules = access(dm_policy="allowlist", allowed_users={"telegram": ["1"]})
    assert check_access(msg(user_id="1", bot_mentioned=False), rules, require_mention=True) == "allow"


def test_numeric_ids_from_the_config_file_match_string_user_ids(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(
        "access:\n  dm_policy: allowlist\n  allowed_users:\n    telegram: [123456789]\n  admins:\n"
        "    telegram: [42]\n", encoding="utf-8")
    rules = load_config(None, {"CHATGATE_HOME": str(tmp_path)}).access
    assert check_access(msg(user_id="123456789"), rules) == "allow"
    assert check_access(msg(user_id="42"), rules) == "allow"
    assert is_admin(rules, "telegram", "42")
    assert check_access(msg(user_id="7"), rules) == "ignore"
