"""Prompts: a reasoning-gym question in the model's own chat template.

The system prompt is one of reasoning-gym's (``SYSTEM_PROMPTS``, "default" unless a campaign says
otherwise), so rewards are comparable with other reasoning-gym results. Every model, including
the built-in tiny tiers, carries its chat template in its tokenizer; external rollouts are
re-rendered with the receiving model's template, never reused as token ids.
"""

from __future__ import annotations

from reasoning_gym.utils import SYSTEM_PROMPTS

DEFAULT_SYSTEM_PROMPT = "default"


def system_prompt(name: str) -> str:
    try:
        return SYSTEM_PROMPTS[name]
    except KeyError:
        raise ValueError(
            f"unknown system prompt {name!r}; reasoning-gym has {', '.join(SYSTEM_PROMPTS)}"
        ) from None


def chat_messages(question: str, system: str = DEFAULT_SYSTEM_PROMPT) -> list[dict[str, str]]:
    return [{"role": "system", "content": system_prompt(system)}, {"role": "user", "content": question}]


def render_prompt(tokenizer, question: str, system: str = DEFAULT_SYSTEM_PROMPT) -> str:
    """The prompt text, ending where the assistant's answer begins."""
    return tokenizer.apply_chat_template(
        chat_messages(question, system), tokenize=False, add_generation_prompt=True
    )
