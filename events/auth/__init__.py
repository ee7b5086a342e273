"""Delivery authentication: who sent this request, and may we believe them?

An authenticator is a callable ``(headers, body) -> Principal`` that raises
`functions.errors.Unauthenticated` (401) with an operator-readable reason that never
echoes a credential. Header names are matched case-insensitively.

    OidcAuthenticator          Pub/Sub push: ``Authorization: Bearer <Google OIDC JWT>``
    HmacAuthenticator          generic webhooks: ``sha256=<hex HMAC(secret, "{ts}.{body}")>``
    MlflowAuthenticator        MLflow 3: ``v1,<base64 HMAC(secret, "{id}.{ts}.{body}")>``
    BearerAuthenticator        static tokens (OCI registry notifications, MinIO)
    SecretHeaderAuthenticator  a secret sent verbatim (Hugging Face ``X-Webhook-Secret``)
    AllowAll                   local development only: accepts everything

`from_spec` builds one from a compact string (so it fits in an environment variable)
or from a mapping with the same keys::

    spec   := "none" | scheme [":" param ("," param)*]
    param  := key "=" value          (a key may repeat: several emails, secrets, tokens)
    value  := literal | "env:" NAME | "file:" PATH     (file contents are stripped)

    oidc:aud=https://fn.example.com,email=push@p.iam.gserviceaccount.com
        keys: aud (required), email (required with Google's issuer; `*`: any Google
        account, on purpose: anyone can mint a token for any audience), iss, jwks, leeway
    hmac:secret=env:WEBHOOK_SECRET,secret=env:WEBHOOK_SECRET_PREVIOUS,window=300
        keys: secret (required), header, timestamp_header, window
    mlflow:secret=file:/var/run/secrets/mlflow          keys: secret (required), window
    bearer:token=file:/var/run/secrets/token            keys: token (required)
    header:name=X-Webhook-Secret,secret=env:HF_SECRET   keys: secret (required), name
    none
    {"scheme": "bearer", "token": ["env:A", "env:B"]}

A literal cannot contain ","; put such values in ``env:`` or ``file:``. A secret named by
``env:``/``file:`` is reported as the principal's subject (which key matched, useful
during rotation); a literal one as ``#<position>``.
"""

from modelhooks.events.auth._base import (
    Authenticator,
    Clock,
    Principal,
    Secrets,
    Trust,
    shares,
    trust_of,
)
from modelhooks.events.auth.oidc import GOOGLE_ISSUERS, GOOGLE_JWKS_URL, OidcAuthenticator
from modelhooks.events.auth.shared_secret import (
    AllowAll,
    BearerAuthenticator,
    HmacAuthenticator,
    MlflowAuthenticator,
    SecretHeaderAuthenticator,
)
from modelhooks.events.auth.spec import from_spec, resolve_value

__all__ = [
    "GOOGLE_ISSUERS",
    "GOOGLE_JWKS_URL",
    "AllowAll",
    "Authenticator",
    "BearerAuthenticator",
    "Clock",
    "HmacAuthenticator",
    "MlflowAuthenticator",
    "OidcAuthenticator",
    "Principal",
    "SecretHeaderAuthenticator",
    "Secrets",
    "Trust",
    "from_spec",
    "resolve_value",
    "shares",
    "trust_of",
]
