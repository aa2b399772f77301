"""What `chatgate setup` asks for Telegram; the person's id can be read from a message to the bot."""

from __future__ import annotations

from platforms.setup import FromMessage, PlatformSetup, Secret, UserIds


def how_to_send(username: str | None, code: str) -> str:
    """The bot's link opens a chat with `/start CODE` ready to send; without its name, type it."""
    link = f"open https://t.me/{username}?start={code} and press Start, or " if username else ""
    return f"{link}send the bot: /start {code}"


SETUP = PlatformSetup(
    "telegram", "Telegram", order=1,
    token=Secret("token", "Bot token (from @BotFather: /newbot, or /mybots → your bot → API Token)"),
    user_ids=UserIds(r"[0-9]{3,20}", "111111111",
                     "Telegram: send @userinfobot a message; it answers with your numeric id",
                     FromMessage("platforms.telegram.sender:sender", how_to_send)))
