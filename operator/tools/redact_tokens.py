"""Credentials recognisable by their own shape: cloud keys and tokens of well-known services.

The patterns come from detect-secrets' plugins (a maintained list, pinned in uv.lock) plus a few
formats it does not know. Each pattern is wrapped so that it can only start where a token
starts (not inside a run of token characters): without that guard, a pattern such as
`eyJ[...]+\\.` is retried at every `eyJ` of a long run and redaction becomes quadratic.
"""

from __future__ import annotations

import re

from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector

__all__ = ["TOKEN_PATTERNS"]

# Plugins whose patterns are a token's own shape. Left out: keyword plugins (our key=value
# rules cover them, in linear time), IP addresses, Artifactory (matches ordinary words),
# npm (`.+` is quadratic on long lines; `_authToken=` is a key=value pair anyway), basic auth
# (our URL rule also handles `redis://:pw@`).
_PLUGINS = (
    AWSKeyDetector,
    AzureStorageKeyDetector,
    DiscordBotTokenDetector,
    GitHubTokenDetector,
    GitLabTokenDetector,
    JwtTokenDetector,
    MailchimpDetector,
    OpenAIDetector,
    PypiTokenDetector,
    SendGridDetector,
    SlackDetector,
    SquareOAuthDetector,
    StripeDetector,
    TelegramBotTokenDetector,
    TwilioKeyDetector,
)

_OWN = (
    r"github_pat_[A-Za-z0-9_]{30,}",  # GitHub fine-grained tokens
    r"gh[pousr]_[A-Za-z0-9]{30,}",
    r"xox[abposr]-[A-Za-z0-9-]{10,}",  # Slack, any layout
    r"sk-(?:proj-|ant-(?:api\d\d-)?)?[A-Za-z0-9_-]{20,}",  # OpenAI / Anthropic style keys
    r"(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}",  # Stripe, test keys too
    r"AIza[0-9A-Za-z_-]{35}",  # Google API keys
    r"ya29\.[0-9A-Za-z_-]{20,}",  # Google OAuth access tokens
    r"glpat-[A-Za-z0-9_-]{20,}",
    r"hv[sbr]\.[A-Za-z0-9_-]{20,}",  # HashiCorp Vault
    r"dop_v1_[a-f0-9]{64}",  # DigitalOcean
    r"npm_[A-Za-z0-9]{36}",
    r"hf_[A-Za-z]{30,}",  # Hugging Face
    r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}",  # Shopify
    r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}",  # Postman
    r"key-[0-9a-f]{32}",  # Mailgun
    r"dp\.(?:st|ct|sa)\.[A-Za-z0-9_.-]{20,}",  # Doppler
    r"[a-z0-9]{6}\.[a-z0-9]{16}(?![A-Za-z0-9.])",  # Kubernetes bootstrap tokens
)

_TOKEN_CHARS = r"A-Za-z0-9_\-+/="
_START = rf"(?<![{_TOKEN_CHARS}])(?=[A-Za-z0-9])"  # every shape starts with a letter or digit


def _patterns() -> list[tuple[re.Pattern[str], int]]:
    """(pattern, group to mask): one alternation for the token shapes (one pass over the text),
    the keyword form apart (it masks its group 1, the value after the keyword)."""
    # ours first: where both match, they take the longer token
    sources = list(_OWN) + [p.pattern for plugin in _PLUGINS for p in plugin.denylist]
    shapes, keyword = [], []
    for source in dict.fromkeys(sources):
        if source.startswith("aws.{0,20}?"):
            # keyword form with bounded quantifiers: cannot run away; it has no token start
            keyword.append((re.compile(source, re.IGNORECASE), 1))
        else:
            shapes.append(f"(?:{source})")
    return [(re.compile(f"{_START}(?:{'|'.join(shapes)})"), 0), *keyword]


TOKEN_PATTERNS: list[tuple[re.Pattern[str], int]] = _patterns()
