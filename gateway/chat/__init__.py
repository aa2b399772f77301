"""The message road: a message from its platform event to the answer sent, in the order it travels.

inbound (intake: check, store, parse a command once) → session_key (which session) → sessions (one
worker per session, in order) → turns (one turn of the agent: open, converse with steering, finish)
or commands + command_handlers (a chat command) → preview (the answer as it is written) → delivery
(the outbox: sent once, in order, retried) with intents (what is about to be sent, found again after
a crash) and files (what people send and what the agent sends back). control answers pairing offers
and reopened chats; throttle limits commands per person.
"""
