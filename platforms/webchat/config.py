"""`platforms.webchat` in config.yaml."""

from __future__ import annotations

from pydantic import Field, SecretStr

from platforms.config import PlatformConfig


class WebchatConfig(PlatformConfig):
    enabled: bool | None = None  # None: on when no other platform is configured
    token: SecretStr | None = None  # required in the page URL (?token=); generated if unset; "": none (loopback only)
    ack_timeout_seconds: float = Field(10.0, gt=0)  # a reply the page does not confirm in time is sent again later

    @property
    def configured(self) -> bool:
        return bool(self.enabled)

    def wanted(self, others: bool) -> bool:
        return self.enabled if self.enabled is not None else not others
