"""Login to the web console (docs/console.md): one-time login tokens signed with the console's secret, and sessions.

A token is `<nonce>.<expires>.<signature>`: HMAC-SHA256 of `<nonce>.<expires>` under the secret the running console
keeps in `<state_dir>/console.json` (owner-only). `eru console url` mints one from that file without talking to the
server; the server accepts each nonce once, before it expires, and answers with a session cookie. Everything here is
a function of its arguments (the clock is passed in as `now`), except the randomness of `new_secret`/`new_nonce`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field

from eru.errors import InvalidInput

TOKEN_TTL_SECONDS = 600.0
SESSION_TTL_SECONDS = 12 * 3600.0
COOKIE_NAME = "eru_console_session"


def new_secret() -> str:
    """A fresh signing secret (32 random bytes, URL-safe text)."""
    return secrets.token_urlsafe(32)


def new_nonce() -> str:
    """A fresh token nonce (16 random bytes)."""
    return secrets.token_urlsafe(16)


def _signature(secret: str, payload: str) -> str:
    return hmac.new(secret.encode(), payload.encode(), hashlib.sha256).hexdigest()[:40]


def mint_token(secret: str, now: float, *, ttl: float = TOKEN_TTL_SECONDS, nonce: str | None = None) -> str:
    """A login token valid once, until `now + ttl`."""
    if ttl <= 0:
        raise InvalidInput("ttl", f"a token must live a positive number of seconds, got {ttl}")
    payload = f"{nonce or new_nonce()}.{int(now + ttl)}"
    return f"{payload}.{_signature(secret, payload)}"


def check_token(secret: str, token: str, now: float) -> tuple[str, float]:
    """The nonce and expiry of a well-signed, unexpired token; `InvalidInput` naming `token` otherwise."""
    parts = token.split(".")
    if len(parts) != 3 or not all(parts):
        raise InvalidInput("token", "not a console login token (expected nonce.expires.signature)")
    nonce, expires_text, signature = parts
    if not expires_text.isdigit():
        raise InvalidInput("token", "the expiry of the token is not a number")
    if not hmac.compare_digest(signature, _signature(secret, f"{nonce}.{expires_text}")):
        raise InvalidInput("token", "the token was not issued by this console (wrong signature)")
    expires = float(expires_text)
    if now >= expires:
        raise InvalidInput("token", "the token has expired: get a new one with `eru console url`")
    return nonce, expires


@dataclass
class Sessions:
    """Used token nonces (until they expire) and live sessions (id → expiry), in the console's memory."""

    secret: str
    used: dict[str, float] = field(default_factory=dict)
    sessions: dict[str, float] = field(default_factory=dict)

    def login(self, token: str, now: float) -> str:
        """Spend `token` and return a new session id; `InvalidInput` if it is bad, expired or already used."""
        nonce, expires = check_token(self.secret, token, now)
        self._forget_expired(now)
        if nonce in self.used:
            raise InvalidInput("token", "this login token was already used: get a new one with `eru console url`")
        self.used[nonce] = expires
        session = secrets.token_urlsafe(32)
        self.sessions[session] = now + SESSION_TTL_SECONDS
        return session

    def valid(self, session: str | None, now: float) -> bool:
        """Whether `session` is a live session id."""
        if not session:
            return False
        expires = self.sessions.get(session)
        return expires is not None and now < expires

    def _forget_expired(self, now: float) -> None:
        self.used = {nonce: t for nonce, t in self.used.items() if t > now}
        self.sessions = {sid: t for sid, t in self.sessions.items() if t > now}
