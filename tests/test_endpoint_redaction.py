"""`agent.endpoint`: what logs and chats may show of the model endpoint's address."""

from __future__ import annotations

from agent.endpoint import for_logs, for_people, redacted


def test_the_helpers_strip_credentials_and_the_address():
    url = "https://bob:hunter22@llm.example.org:8443/v1?key=sk-abc123&api-version=2024"
    assert redacted(url) == "https://llm.example.org:8443/v1"
    failed = f"Cannot connect to {url}/chat/completions (llm.example.org:8443, user bob:hunter22, sk-abc123)"
    logged = for_logs(failed, url)
    assert "hunter22" not in logged and "sk-abc123" not in logged and "https://llm.example.org:8443/v1/chat" in logged
    told = for_people(failed, url)
    assert "hunter22" not in told and "sk-abc123" not in told and "llm.example.org" not in told and "8443" not in told
    assert told.startswith("Cannot connect to the model endpoint/chat/completions (the model endpoint, user ***")
    assert redacted("http://[::1") == "(an unparsable URL)"
