"""Chat history: an episode as chat messages, rendered to text only when asked.

:class:`Conversation` is the plain data structure (also used by the episode runner);
:class:`ChatHistory` / :class:`AsyncChatHistory` are the wrappers that keep one per
episode and put it in ``info["messages"]``.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from gem_core.core import ResetReturn, StepReturn
from gem_core.errors import ConfigError
from gem_core.wrappers.base import AsyncWrapper, Wrapper, WrapperHooks

__all__ = [
    "CHAT_MODES",
    "AsyncChatHistory",
    "ChatHistory",
    "ChatMode",
    "ChatTokenizer",
    "Conversation",
    "Message",
]

#: One chat message: ``{"role": "system" | "user" | "assistant" | "tool", "content": str}``.
Message = dict[str, Any]
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

# A fixed conversation rendered before the new messages, so a delta is the rendered text of
# the new messages exactly as they appear mid-conversation (see Conversation.render_delta).
_ANCHOR: list[Message] = [
    {"role": "system", "content": "s"},
    {"role": "user", "content": "u"},
    {"role": "assistant", "content": "a"},
]


class ChatTokenizer(Protocol):
    """What the chat wrapper and the runner need from a tokenizer (a Hugging Face one fits)."""

    def apply_chat_template(self, conversation: list[Message], **kwargs: Any) -> Any: ...

    def encode(self, text: str, **kwargs: Any) -> list[int]: ...

    def decode(self, token_ids: list[int], **kwargs: Any) -> str: ...


def render_chat(tokenizer: ChatTokenizer, messages: list[Message], *, add_generation_prompt: bool) -> str:
    """Render messages through the tokenizer's chat template to text."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    if not isinstance(text, str):
        raise TypeError(f"apply_chat_template(tokenize=False) returned {type(text).__name__}, expected str")
    return text


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

    def add_observation(self, text: str, *, role: str = "user") -> Message:
        """Append an observation (``role="tool"`` for tool output) and return the message."""
        message: Message = {"role": role, "content": text}
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
        """Plain text: the contents joined by newlines, actions included or not."""
        return "\n".join(m["content"] for m in self.view() if include_actions or m["role"] != "assistant")

    def render(self, tokenizer: ChatTokenizer, *, add_generation_prompt: bool = True) -> str:
        """The whole (limited) history through the chat template."""
        return render_chat(tokenizer, self.view(), add_generation_prompt=add_generation_prompt)

    @staticmethod
    def answer_footer(tokenizer: ChatTokenizer) -> str:
        """What the template writes after an assistant message's content (e.g. ``<|im_end|>`` and a newline).

        Raises:
            ValueError: the template does not render an assistant message after its own
                generation prompt (so no footer can be cut out).
        """
        prompt = render_chat(tokenizer, _ANCHOR[:2], add_generation_prompt=True)
        answered = render_chat(tokenizer, _ANCHOR, add_generation_prompt=False)
        content = _ANCHOR[2]["content"]
        if not answered.startswith(prompt + content):
            raise ValueError(
                "the chat template does not render an assistant message right after its generation prompt, "
                "so turn deltas cannot be computed; re-render the whole history instead"
            )
        return answered[len(prompt) + len(content) :]

    @staticmethod
    def render_delta(tokenizer: ChatTokenizer, new_messages: list[Message]) -> str:
        """Render only ``new_messages`` as they appear after a finished assistant turn.

        The result starts right after the assistant message's footer (see
        :meth:`answer_footer`) and ends with the generation prompt of the next assistant
        turn. So ``prompt + completion + footer + delta`` is the rendered conversation, at
        the cost of one render of a few messages instead of the whole history: a
        multi-turn episode is O(T) to render instead of O(T^2).

        Raises:
            ValueError: the template is not prefix-stable (rendering more messages changed the
                text of earlier ones), so deltas cannot be cut from it.
        """
        base = render_chat(tokenizer, _ANCHOR, add_generation_prompt=False)
        full = render_chat(tokenizer, _ANCHOR + new_messages, add_generation_prompt=True)
        if not full.startswith(base):
            raise ValueError(
                "the chat template is not prefix-stable: rendering more messages changed the earlier text, "
                "so turn deltas cannot be computed; re-render the whole history instead"
            )
        return full[len(base) :]


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
        self._footer: str | None = None

    def _render(self, latest: str) -> str:
        conv, tok = self.conversation, self.tokenizer
        if self.mode == "observation":
            return conv.text(include_actions=False)
        if self.mode == "observation_action":
            return conv.text(include_actions=True)
        if self.mode == "chat":
            return conv.render(tok) if tok is not None else latest
        # chat_first_turn: the opening turn in the template, later messages appended as plain text
        if tok is None:
            return conv.text(include_actions=True)
        first = conv.view()[: conv.first_observation_index + 1]
        head = render_chat(tok, first, add_generation_prompt=True)
        return head + "\n".join(m["content"] for m in conv.view()[len(first) :])

    def _on_reset(self, obs: str, info: dict[str, Any]) -> ResetReturn:
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
            if self._footer is None:
                self._footer = Conversation.answer_footer(self.tokenizer)
            delta = self._footer + Conversation.render_delta(self.tokenizer, [message])
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
    """


class ChatHistory(_ChatHistoryHooks, Wrapper):
    __doc__ = _CHAT_DOC


class AsyncChatHistory(_ChatHistoryHooks, AsyncWrapper):
    __doc__ = _CHAT_DOC
