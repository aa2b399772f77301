"""Attack review: the web chat's token file. Whoever holds the token is the machine's owner (an admin), so a
token file another local user can read — written by hand, or restored from a backup with the umask's 0644 —
gave them the web chat; the file is now made private when it is read. A link planted in its place is not
followed (nor written through when a new token is made)."""

from __future__ import annotations

import os

import pytest

from platforms.registry import PlatformUnavailable
from platforms.webchat.access import TOKEN_FILE, resolve_token


def test_a_token_file_others_can_read_is_made_private(tmp_path):
    path = tmp_path / TOKEN_FILE
    path.write_text("a-token-written-by-hand\n")
    path.chmod(0o644)
    assert resolve_token(None, tmp_path, "127.0.0.1") == "a-token-written-by-hand"
    assert path.stat().st_mode & 0o777 == 0o600


def test_an_empty_token_file_is_filled_privately(tmp_path):
    path = tmp_path / TOKEN_FILE
    path.write_text("")
    path.chmod(0o666)
    token = resolve_token(None, tmp_path, "127.0.0.1")
    assert token and path.read_text().strip() == token
    assert path.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("dangling", [False, True])
def test_a_link_as_the_token_file_is_refused(tmp_path, dangling: bool):
    elsewhere = tmp_path / "elsewhere"
    if not dangling:
        elsewhere.write_text("known-to-whoever-planted-it\n")
    home = tmp_path / "home"
    home.mkdir()
    (home / TOKEN_FILE).symlink_to(elsewhere)
    with pytest.raises(PlatformUnavailable, match="not a link"):
        resolve_token(None, home, "127.0.0.1")
    assert os.path.lexists(home / TOKEN_FILE)
    assert elsewhere.exists() is (not dangling)  # nothing made where the dangling link pointed
