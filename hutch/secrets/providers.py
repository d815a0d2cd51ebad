"""Providers: the auth scheme and hosts of common services, so a secret needs only its value.

A scheme is the header a client sends the credential in and its format ("{value}" is the
credential). In a box, a client library builds that header from the stand-in in its env var;
the egress proxy swaps the stand-in only in that header, in that format, on those hosts.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Provider:
    name: str
    description: str
    header: str
    format: str
    hosts: tuple[str, ...]
    env: str  # the variable its clients read


BEARER = "Bearer {value}"

PROVIDERS: dict[str, Provider] = {p.name: p for p in (
    Provider("anthropic", "Anthropic API (Claude)", "x-api-key", "{value}", ("api.anthropic.com",), "ANTHROPIC_API_KEY"),
    Provider("openai", "OpenAI API", "authorization", BEARER, ("api.openai.com",), "OPENAI_API_KEY"),
    Provider("gemini", "Google Gemini API", "x-goog-api-key", "{value}", ("generativelanguage.googleapis.com",),
             "GEMINI_API_KEY"),
    Provider("github", "GitHub REST and GraphQL API", "authorization", BEARER, ("api.github.com",), "GITHUB_TOKEN"),
    Provider("mistral", "Mistral AI API", "authorization", BEARER, ("api.mistral.ai",), "MISTRAL_API_KEY"),
    Provider("groq", "Groq API", "authorization", BEARER, ("api.groq.com",), "GROQ_API_KEY"),
    Provider("openrouter", "OpenRouter API", "authorization", BEARER, ("openrouter.ai",), "OPENROUTER_API_KEY"),
    Provider("huggingface", "Hugging Face Hub and Inference", "authorization", BEARER,
             ("huggingface.co", "router.huggingface.co"), "HF_TOKEN"),
    Provider("stripe", "Stripe API", "authorization", BEARER, ("api.stripe.com",), "STRIPE_API_KEY"),
    Provider("vercel", "Vercel API", "authorization", BEARER, ("api.vercel.com",), "VERCEL_TOKEN"),
)}

DEFAULT_HEADER = "authorization"  # a secret with no provider and no auth of its own
DEFAULT_FORMAT = BEARER
