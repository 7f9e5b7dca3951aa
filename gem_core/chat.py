r"""Chat messages and chat templates: the one place gem renders conversations to tokens.

Everything that turns messages into a model's input goes through here: the episode
engine (:mod:`gem_core.episode`), the sample layouts (:mod:`gem_core.rl.layouts`), the
chat wrapper (:mod:`gem_core.wrappers.chat`) and the trainer adapters.

Token in, token out, without re-rendering the history
-----------------------------------------------------
A multi-turn episode's context is built once and only ever extended::

    prompt_ids(first messages)  +  generated ids  +  bridge(new messages)  +  generated ids  + ...

:meth:`ChatRenderer.bridge_ids` renders *only the new messages*, against a fixed anchor
conversation that ends with a finished assistant message (the way verl's
continuous-token builder renders new messages against a fixed base). The bridge is
what the template writes after an assistant message's content: its end-of-turn footer
(``<|im_end|>\n``), the new messages, and the next generation prompt. One small
render per turn, whatever the length of the history, and the sampled ids are never
decoded and re-encoded.

Because the history is never re-rendered, templates that *rewrite* earlier turns (Qwen3
drops earlier ``<think>`` blocks) work: the context holds exactly what the model saw
when it generated each turn. What a template must do for the bridge to be cut is to
render an assistant message followed by new messages the same way whatever comes
after; :class:`ChatRenderer` probes that once when it is built and raises
:class:`~gem_core.errors.TemplatePrefixError` naming the template if it does not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from gem_core.errors import TemplatePrefixError

__all__ = [
    "HISTORY_PROBE",
    "ChatRenderer",
    "ChatTokenizer",
    "Message",
    "render_ids",
    "render_text",
    "tail_overlap",
    "template_name",
]

#: One chat message as Hugging Face chat templates take it: ``{"role": ..., "content": ...}``.
Message = dict[str, Any]


class ChatTokenizer(Protocol):
    """The part of a Hugging Face tokenizer gem uses (any object with these methods fits)."""

    def apply_chat_template(self, conversation: Any, *args: Any, **kwargs: Any) -> Any: ...

    def encode(self, text: str, *args: Any, **kwargs: Any) -> list[int]: ...

    def decode(self, token_ids: Any, *args: Any, **kwargs: Any) -> str: ...


def template_name(tokenizer: Any) -> str:
    """A readable name of a tokenizer's chat template for error messages (its model path, else its class)."""
    name = getattr(tokenizer, "name_or_path", None)
    return f"{type(tokenizer).__name__}({name!r})" if name else type(tokenizer).__name__


def render_text(
    tokenizer: ChatTokenizer,
    messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> str:
    """Render ``messages`` through the tokenizer's chat template to text."""
    text = tokenizer.apply_chat_template(
        [dict(m) for m in messages],
        tokenize=False,
        add_generation_prompt=add_generation_prompt,
        **(chat_template_kwargs or {}),
    )
    if not isinstance(text, str):
        raise TemplatePrefixError(
            f"{template_name(tokenizer)}.apply_chat_template(tokenize=False) returned {type(text).__name__}, "
            "expected str"
        )
    return text


def render_ids(
    tokenizer: ChatTokenizer,
    messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> list[int]:
    """Render ``messages`` with the chat template and encode the text without adding special tokens.

    Rendering to text and encoding behaves the same across transformers versions
    (``tokenize=True`` changed its return type in transformers 5).
    """
    text = render_text(
        tokenizer, messages, add_generation_prompt=add_generation_prompt, chat_template_kwargs=chat_template_kwargs
    )
    return list(tokenizer.encode(text, add_special_tokens=False))


def tail_overlap(generated: Sequence[int], following: Sequence[int]) -> int:
    """Length of the longest head of ``following`` that ``generated`` already ends with.

    The model usually generates the head of the template's footer itself (its stop
    token, e.g. ``<|im_end|>``); some templates (GLM) even reuse the stop token as the
    next message's header. Those tokens are kept once, as generated.
    """
    for k in range(min(len(following), len(generated)), 0, -1):
        if list(generated[len(generated) - k :]) == list(following[:k]):
            return k
    return 0


# A marker no model output or template contains, as the anchor's assistant content: the
# bridge is everything the template writes after it.
_MARKER = "\u2063gem-anchor\u2063"
# Anchors tried in order: templates that refuse a system role (Gemma 1) get the second.
_ANCHORS: tuple[tuple[Message, ...], ...] = (
    (
        {"role": "system", "content": "S"},
        {"role": "user", "content": "U"},
        {"role": "assistant", "content": _MARKER},
    ),
    (
        {"role": "user", "content": "U"},
        {"role": "assistant", "content": _MARKER},
    ),
)
_PROBES: tuple[tuple[Message, ...], ...] = (
    ({"role": "user", "content": "Lower than 8."},),
    (
        {"role": "user", "content": "Higher than 4.\nTry again."},
        {"role": "assistant", "content": "6"},
        {"role": "user", "content": "Correct."},
    ),
)
#: A conversation whose assistant turns carry ``<think>`` blocks, to tell whether a template rewrites history.
HISTORY_PROBE: tuple[Message, ...] = (
    {"role": "system", "content": "You are playing a game."},
    {"role": "user", "content": "Guess a number between 1 and 16."},
    {"role": "assistant", "content": "<think>\nStart in the middle.\n</think>\n\nMy guess is 8."},
    {"role": "user", "content": "Lower than 8."},
    {"role": "assistant", "content": "<think>\nHalve again.\n</think>\n\nMy guess is 4."},
    {"role": "user", "content": "Higher than 4."},
)


class ChatRenderer:
    """Renders first prompts and per-turn bridges for one tokenizer; built once, used for every episode.

    Building it probes the template (the start-up check): it must render an assistant
    message followed by new messages with a prefix that does not depend on the new
    messages, so each turn's bridge can be cut out of one small render.

    Args:
        tokenizer: A tokenizer with a chat template (:class:`ChatTokenizer`).
        chat_template_kwargs: Extra ``apply_chat_template`` arguments (e.g. ``enable_thinking``).

    Attributes:
        rewrites_history: The template re-renders earlier turns differently once the
            conversation grows (e.g. drops ``<think>`` blocks). Informational: the
            engine never re-renders history, so the token-in/token-out context is still
            exactly what the model saw; a per-transition prompt re-rendered from messages
            would differ from it.

    Raises:
        TemplatePrefixError: The template cannot be cut into bridges; the message names
            the template and the fallback.
    """

    def __init__(self, tokenizer: ChatTokenizer, chat_template_kwargs: Mapping[str, Any] | None = None) -> None:
        self.tokenizer = tokenizer
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.name = template_name(tokenizer)
        self._anchor, self._head = self._find_anchor()
        for probe in _PROBES:  # the head must not depend on what follows
            self.bridge_text(list(probe))
        self.rewrites_history = self._probe_rewrites()

    # ------------------------------------------------------------------ public

    def render(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True) -> str:
        """Render whole ``messages`` to text (for first prompts and message-based policies)."""
        return render_text(
            self.tokenizer,
            messages,
            add_generation_prompt=add_generation_prompt,
            chat_template_kwargs=self.chat_template_kwargs,
        )

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """Token ids of ``messages`` followed by the generation prompt: an episode's first context."""
        return list(self.tokenizer.encode(self.render(messages), add_special_tokens=False))

    def bridge_text(self, new_messages: Sequence[Mapping[str, Any]]) -> str:
        """What follows a finished assistant message's content when ``new_messages`` come next.

        The template's end-of-answer footer, ``new_messages`` rendered as they appear
        mid-conversation, and the generation prompt of the next assistant turn. So
        ``prompt + answer + bridge_text(new)`` is the next prompt, as text.

        Raises:
            TemplatePrefixError: Rendering ``new_messages`` changed the text before them.
        """
        try:
            full = render_text(
                self.tokenizer,
                [*self._anchor, *new_messages],
                add_generation_prompt=True,
                chat_template_kwargs=self.chat_template_kwargs,
            )
        except TemplatePrefixError:
            raise
        except Exception as exc:  # jinja raises its own errors for roles a template refuses
            raise TemplatePrefixError(
                f"the chat template of {self.name} cannot render the messages {[m.get('role') for m in new_messages]} "
                f"after an assistant turn: {type(exc).__name__}: {exc}"
            ) from exc
        if not full.startswith(self._head):
            raise TemplatePrefixError(
                f"the chat template of {self.name} renders the conversation before the new messages "
                f"{[m.get('role') for m in new_messages]} differently depending on what follows, so a turn's "
                "new tokens cannot be cut out of a small render. Fall back to re-rendering every turn "
                "(EpisodeEngine(context='rerender'), per-transition samples only), or use a template variant "
                "that renders earlier messages independently of later ones."
            )
        return full[len(self._head) :]

    def bridge_ids(self, new_messages: Sequence[Mapping[str, Any]], generated: Sequence[int] = ()) -> list[int]:
        """Token ids to append after ``generated`` so the context ends with ``new_messages`` and a generation prompt.

        The head of the bridge that ``generated`` already ends with (its stop token) is
        not repeated.
        """
        ids = list(self.tokenizer.encode(self.bridge_text(new_messages), add_special_tokens=False))
        return ids[tail_overlap(generated, ids) :]

    # ------------------------------------------------------------------ probing

    def _find_anchor(self) -> tuple[tuple[Message, ...], str]:
        failures: list[str] = []
        for anchor in _ANCHORS:
            try:
                text = render_text(
                    self.tokenizer,
                    [*anchor, *_PROBES[0]],
                    add_generation_prompt=True,
                    chat_template_kwargs=self.chat_template_kwargs,
                )
            except TemplatePrefixError:
                raise
            except Exception as exc:  # templates raise jinja's own errors for roles they refuse
                failures.append(f"{[m['role'] for m in anchor]}: {type(exc).__name__}: {exc}")
                continue
            at = text.find(_MARKER)
            if at < 0:
                failures.append(f"{[m['role'] for m in anchor]}: the assistant's content does not appear in the text")
                continue
            return anchor, text[: at + len(_MARKER)]
        raise TemplatePrefixError(
            f"the chat template of {self.name} cannot render a finished assistant message followed by a user "
            f"message ({'; '.join(failures)}), so per-turn token bridges cannot be built. Use a tokenizer whose "
            "template renders multi-turn chats."
        )

    def _probe_rewrites(self) -> bool:
        try:
            # the history as the model saw it after answering, then once the env has replied
            before = self.render(HISTORY_PROBE[:3], add_generation_prompt=False)
            after = self.render(HISTORY_PROBE[:4], add_generation_prompt=True)
        except Exception:  # a template that cannot render the probe tells nothing about rewriting
            return False
        return not after.startswith(before)
