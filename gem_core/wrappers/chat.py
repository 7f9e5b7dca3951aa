"""Chat history: an episode as chat messages, rendered to text only when asked.

:class:`Conversation` is the plain data structure; :class:`ChatHistory` /
:class:`AsyncChatHistory` are the wrappers that keep one per episode and put it in
``info["messages"]``. Templates are rendered by :mod:`gem_core.chat` (``ChatTokenizer``
and ``Message`` are re-exported from there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from gem_core.chat import ChatRenderer, ChatTokenizer, Message, render_text, template_name
from gem_core.core import ResetReturn, StepReturn
from gem_core.errors import ConfigError, ImageError
from gem_core.multimodal import Observation, message_images, message_text, to_message_content
from gem_core.wrappers.base import AsyncWrapper, Wrapper, WrapperHooks

__all__ = [
    "CHAT_MODES",
    "AsyncChatHistory",
    "ChatHistory",
    "ChatMode",
    "ChatTokenizer",
    "Conversation",
    "Message",
    "renders_image_parts",
]

#: The text of the probe message that tells whether a chat template renders image parts.
_PROBE_TEXT = "gem image probe"


def renders_image_parts(tokenizer: ChatTokenizer) -> bool:
    """Whether ``tokenizer``'s chat template renders a message of image and text parts (a VLM's template).

    A text-only template either fails on a list ``content`` or writes the list's Python
    repr into the prompt; both count as no.
    """
    probe = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": _PROBE_TEXT}]}]
    try:
        text = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=False)
    except Exception:  # any failure of a template on image parts means it cannot render them
        return False
    return isinstance(text, str) and _PROBE_TEXT in text and "'type'" not in text


ChatMode = Literal["observation", "observation_action", "chat", "chat_first_turn"]

#: Modes, with GEM's names as aliases.
CHAT_MODES: dict[str, ChatMode] = {
    "observation": "observation",
    "observation_action": "observation_action",
    "chat": "chat",
    "chat_first_turn": "chat_first_turn",
    "concat": "observation",
    "concat_with_action": "observation_action",
    "concat_chat": "chat",
    "concat_chat_on_reset": "chat_first_turn",
}


class Conversation:
    """The messages of one episode: system prompt, observations, actions.

    Args:
        system_prompt: Optional first message with role ``system``.
        max_history: Keep only the last ``max_history`` exchanges (assistant message and the
            observation that answers it) in :meth:`view`; the system prompt and the first
            observation (the task) are always kept. ``None`` keeps everything.
    """

    def __init__(self, system_prompt: str | None = None, max_history: int | None = None) -> None:
        if max_history is not None and max_history < 0:
            raise ConfigError(f"max_history must be >= 0 or None, got {max_history}")
        self.system_prompt = system_prompt
        self.max_history = max_history
        self.messages: list[Message] = []
        if system_prompt:
            self.messages.append({"role": "system", "content": system_prompt})
        #: Index of the first observation (the task), always kept by view().
        self.first_observation_index = len(self.messages)

    def add_observation(self, obs: Observation, *, role: str = "user") -> Message:
        """Append an observation (``role="tool"`` for tool output) and return the message.

        A :class:`~gem_core.multimodal.Content` observation becomes a list of content parts
        (text and ``{"type": "image", "image": Image}``), which VLM chat templates render.
        """
        message: Message = {"role": role, "content": to_message_content(obs)}
        self.messages.append(message)
        return message

    def add_action(self, text: str) -> Message:
        """Append the model's response as an assistant message and return it."""
        message: Message = {"role": "assistant", "content": text}
        self.messages.append(message)
        return message

    def view(self) -> list[Message]:
        """The messages after applying ``max_history`` (a new list; the dicts are shared)."""
        if self.max_history is None:
            return list(self.messages)
        head = self.messages[: self.first_observation_index + 1]
        tail = self.messages[self.first_observation_index + 1 :]
        keep = 2 * self.max_history
        return head + (tail[len(tail) - keep :] if keep else [])

    def text(self, *, include_actions: bool) -> str:
        """Plain text: the contents joined by newlines, actions included or not (``<image>`` for each image)."""
        return "\n".join(message_text(m["content"]) for m in self.view() if include_actions or m["role"] != "assistant")

    def render(self, tokenizer: ChatTokenizer, *, add_generation_prompt: bool = True) -> str:
        """The whole (limited) history through the chat template."""
        return render_text(tokenizer, self.view(), add_generation_prompt=add_generation_prompt)


class _ChatHistoryHooks(WrapperHooks):
    def __init__(
        self,
        env: Any,
        mode: str = "chat",
        system_prompt: str | None = None,
        max_history: int | None = None,
        tokenizer: ChatTokenizer | None = None,
        incremental: bool = False,
    ) -> None:
        super().__init__(env)  # type: ignore[call-arg]  # Wrapper or AsyncWrapper, next in the MRO
        if mode not in CHAT_MODES:
            raise ConfigError(f"unknown chat mode {mode!r}; choose one of {sorted(CHAT_MODES)}")
        self.mode: ChatMode = CHAT_MODES[mode]
        if incremental and (self.mode != "chat" or tokenizer is None):
            raise ConfigError("incremental=True needs mode='chat' and a tokenizer (it returns rendered deltas)")
        if max_history is not None and max_history < 0:
            raise ConfigError(f"max_history must be >= 0 or None, got {max_history}")
        self.system_prompt = system_prompt
        self.max_history = max_history
        self.tokenizer = tokenizer
        self.incremental = incremental
        self.conversation = Conversation(system_prompt, max_history)
        self._renderer: ChatRenderer | None = None
        #: Whether the tokenizer's template renders image parts; probed at the first image it would render.
        self._template_takes_images: bool | None = None

    def _check_template_takes(self, messages: Sequence[Message]) -> None:
        """Refuse, by name, to render images through a text-only chat template (it fails or writes a repr)."""
        count = sum(len(message_images(m["content"])) for m in messages)
        if not count or self.tokenizer is None:
            return
        if self._template_takes_images is None:
            self._template_takes_images = renders_image_parts(self.tokenizer)
        if not self._template_takes_images:
            raise ImageError(
                f"the chat template of {template_name(self.tokenizer)} renders text only, and the messages to "
                f"render hold {count} image(s). Pass the vision-language model's processor as tokenizer= (e.g. "
                "AutoProcessor.from_pretrained(...): its template writes the image placeholders), or use "
                "mode='observation' / 'observation_action' (each image becomes '<image>' text), or no tokenizer "
                "(the image parts stay in info['messages'])"
            )

    def _render(self, latest: Observation) -> Observation:
        conv, tok = self.conversation, self.tokenizer
        if self.mode == "observation":
            return conv.text(include_actions=False)
        if self.mode == "observation_action":
            return conv.text(include_actions=True)
        if self.mode == "chat":
            if tok is None:
                return latest
            self._check_template_takes(conv.view())
            return conv.render(tok)
        # chat_first_turn: the opening turn in the template, later messages appended as plain text
        if tok is None:
            return conv.text(include_actions=True)
        first = conv.view()[: conv.first_observation_index + 1]
        self._check_template_takes(first)
        head = render_text(tok, first, add_generation_prompt=True)
        return head + "\n".join(message_text(m["content"]) for m in conv.view()[len(first) :])

    def _on_reset(self, obs: Observation, info: dict[str, Any]) -> ResetReturn:
        self.conversation = Conversation(self.system_prompt, self.max_history)
        self.conversation.add_observation(obs)
        info = {**info, "messages": self.conversation.view()}
        return self._render(obs), info

    def _on_action(self, action: str) -> str:
        self.conversation.add_action(action)
        return action

    def _on_step(self, result: StepReturn) -> StepReturn:
        obs, reward, terminated, truncated, info = result
        role = "tool" if info.get("tool_calls") else "user"
        message = self.conversation.add_observation(obs, role=role)
        info = {**info, "messages": self.conversation.view()}
        if self.tokenizer is not None and self.mode == "chat":
            self._check_template_takes([message])
            if self._renderer is None:  # probes the template once, on the first step
                self._renderer = ChatRenderer(self.tokenizer)
            delta = self._renderer.bridge_text([message])
            info["prompt_delta"] = delta
            if self.incremental:
                return delta, reward, terminated, truncated, info
        return self._render(obs), reward, terminated, truncated, info


_CHAT_DOC = """Keeps the episode as chat messages and returns it as the observation.

    Every ``info`` gets ``"messages"``: the structured history (roles ``system``, ``user``,
    ``assistant``, and ``tool`` for an observation produced by tool calls, i.e. when the
    step's ``info["tool_calls"]`` is non-zero). With a tokenizer in ``chat`` mode, step infos
    also get ``"prompt_delta"``: the text between the action's content and the next
    completion (the assistant footer, the new observation's message and the next
    generation prompt), for adapters that extend a prompt instead of re-rendering it:
    ``rendered_prompt + action + prompt_delta`` is the next rendered prompt.

    Args:
        env: The env to wrap.
        mode: What the observation becomes (GEM's names are accepted as aliases):
            ``"observation"`` (``concat``): all observations so far, newline-joined;
            ``"observation_action"`` (``concat_with_action``): observations and actions as plain text;
            ``"chat"`` (``concat_chat``): the chat-templated history when a tokenizer is given,
            else the raw observation (the messages are in ``info``);
            ``"chat_first_turn"`` (``concat_chat_on_reset``): the first turn through the
            chat template, later actions and observations appended as plain text.
        system_prompt: Optional system message.
        max_history: Keep the last N exchanges (plus system prompt and task); ``None`` keeps all.
        tokenizer: Anything with ``apply_chat_template`` (e.g. a Hugging Face tokenizer).
        incremental: In ``chat`` mode with a tokenizer, step observations are the rendered
            deltas instead of the whole history.

    Raises:
        ConfigError: unknown mode, negative ``max_history``, or ``incremental`` without a tokenizer.
        ImageError: In ``chat`` or ``chat_first_turn`` mode with a tokenizer whose chat
            template renders text only (:func:`renders_image_parts`), when a message to render
            holds an image; the message says what to pass instead.
    """


class ChatHistory(_ChatHistoryHooks, Wrapper):
    __doc__ = _CHAT_DOC


class AsyncChatHistory(_ChatHistoryHooks, AsyncWrapper):
    __doc__ = _CHAT_DOC
