r"""Small real Hugging Face tokenizers built in code, for tests that need a chat template.

No hub access: a byte-level BPE is trained on a fixed corpus in a few milliseconds,
wrapped in ``transformers.PreTrainedTokenizerFast`` and given a ChatML (Qwen-style)
chat template. Needs the ``tokenizers`` and ``transformers`` packages (the ``test``
extra); they are imported inside :func:`build_chat_tokenizer`, never by gem_core proper.

Templates:

* ``"chatml"``: every message rendered verbatim, ``<|im_start|>role\ncontent<|im_end|>\n``;
  it extends its own prefix, so the token-in/token-out layout works.
* ``"chatml_vision"``: ChatML whose messages may hold content parts; each image part is
  Qwen2-VL's placeholder ``<|vision_start|><|image_pad|><|vision_end|>`` (the tokenizer gets
  those special tokens), for :func:`~gem_core.testing_models.build_tiny_vlm_processor`.
* ``"chatml_drop_think"``: like Qwen3, it drops ``<think>...</think>`` from assistant
  messages that come before the last user message, so a rendering of the history
  stops being a prefix of the next one (the case the layout must reject).
* ``"chatml_tools"``: ChatML with Hermes/Qwen2.5-style tools: the signatures in the system
  block, calls written as ``<tool_call>`` JSON, tool results as ``<tool_response>`` blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gem_core.rl.types import Episode, Message, Turn

__all__ = ["CHAT_TEMPLATES", "SPECIAL_TOKENS", "VISION_TOKENS", "build_chat_tokenizer", "synthetic_chat_episode"]

#: Special tokens of the test tokenizers (ChatML names).
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

_CHATML = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

_CHATML_DROP_THINK = (
    "{%- set ns = namespace(last_user=-1) %}"
    "{%- for message in messages %}{%- if message['role'] == 'user' %}{%- set ns.last_user = loop.index0 %}"
    "{%- endif %}{%- endfor %}"
    "{%- for message in messages %}"
    "{%- set content = message['content'] %}"
    "{%- if message['role'] == 'assistant' and loop.index0 < ns.last_user and '</think>' in content %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}"
    "{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# Hermes / Qwen2.5 style tools: signatures in the system block, calls as <tool_call> JSON, results as
# <tool_response> blocks in one user message per run of tool messages.
_CHATML_TOOLS = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\n\n' }}{%- endif %}"
    "{{- '# Tools\n\nFunction signatures:\n<tools>' }}"
    "{%- for tool in tools %}{{- '\n' + (tool | tojson) }}{%- endfor %}"
    '{{- \'\n</tools>\n\nCall one as <tool_call>\n{"name": <name>, "arguments": <object>}\n</tool_call>'
    "<|im_end|>\n' }}"
    "{%- elif messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' and loop.first %}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\n' + (message['content'] or '') }}"
    "{%- for call in message.get('tool_calls') or [] %}"
    "{%- if message['content'] or not loop.first %}{{- '\n' }}{%- endif %}"
    "{{- '<tool_call>\n{\"name\": \"' + call['function']['name'] + '\", \"arguments\": ' }}"
    "{{- call['function']['arguments'] | tojson }}{{- '}\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\n' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{%- if loop.first or loop.previtem['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\n<tool_response>\n' + message['content'] + '\n</tool_response>' }}"
    "{%- if loop.last or loop.nextitem['role'] != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)

# Qwen2-VL's way: a message's content is a string or a list of parts; each image part (Hugging Face's
# {"type": "image"} or OpenAI's {"type": "image_url"}) is written as one placeholder that the processor
# expands into the image's tokens.
_CHATML_VISION = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'text' %}{{- part['text'] }}"
    "{%- elif part['type'] in ('image', 'image_url') %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- endif %}{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

#: Jinja chat templates by name.
CHAT_TEMPLATES = {
    "chatml": _CHATML,
    "chatml_drop_think": _CHATML_DROP_THINK,
    "chatml_tools": _CHATML_TOOLS,
    "chatml_vision": _CHATML_VISION,
}

#: The vision tokens of ``chatml_vision`` tokenizers (Qwen2-VL's names).
VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]

_CORPUS = [
    "You are a helpful assistant. Think step by step, then answer.",
    "I picked a whole number between 1 and 16. You have 5 guesses. Answer with a number, e.g. 7.",
    "At turn 3, you guessed 25, and the target number is lower than 25.",
    "<think>The number is lower, so I try the middle of the range.</think> My guess is 8.",
    "Wrong format: answer with \\boxed{...}. The reward is -0.1 for a malformed action.",
    "system user assistant tool observation reward done. Hello world! 0123456789 +-*/=()[]{}<>",
    "Sudoku Minesweeper Wordle Hangman Mastermind: reveal (2, 3); guess CRANE; letter e.",
]


def build_chat_tokenizer(
    template: str = "chatml",
    *,
    vocab_size: int = 400,
    corpus: Sequence[str] | None = None,
    split_digits: bool = False,
) -> Any:
    """Build a byte-level BPE ``PreTrainedTokenizerFast`` with a ChatML chat template.

    Args:
        template: A key of :data:`CHAT_TEMPLATES`.
        vocab_size: BPE vocabulary size (the 256 byte symbols plus merges plus specials).
        corpus: Texts to learn the merges from; defaults to a small fixed corpus. Any text
            still encodes (byte-level), a corpus only decides how short it gets: trained on
            an env's own messages, a word or a number is one token.
        split_digits: Keep runs of digits apart from the text around them, so that a
            number is the same token after a space ("higher than 5") as inside an answer
            box; a small model then needs to learn each number once.

    Returns:
        A ``transformers.PreTrainedTokenizerFast`` with ``eos_token="<|im_end|>"`` and
        ``pad_token="<|endoftext|>"``; deterministic for given arguments.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if template not in CHAT_TEMPLATES:
        raise ValueError(f"unknown template {template!r}; choose one of {sorted(CHAT_TEMPLATES)}")
    backend = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.pre_tokenizer = (
        pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=False), byte_level])
        if split_digits
        else byte_level
    )
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(list(corpus) if corpus is not None else _CORPUS * 4, trainer=trainer)
    vision = VISION_TOKENS if template == "chatml_vision" else []
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", *vision],
        chat_template=CHAT_TEMPLATES[template],
    )


def synthetic_chat_episode(
    tokenizer: Any,
    actions: Sequence[str],
    replies: Sequence[str],
    rewards: Sequence[float],
    *,
    first_prompt: str = "I picked a whole number between 1 and 16. Guess it.",
    system: str | None = "You are playing a game.",
    start_state_id: str = "core:NumberGuess-v0/seed=0",
    episode_id: str = "ep-0",
    with_stop_token: bool = True,
    generated_ids: Sequence[Sequence[int]] | None = None,
) -> Episode:
    """Build a chat :class:`~gem_core.rl.types.Episode` as a runner using ``tokenizer`` would record it.

    Each turn's ``prompt_messages`` is the whole history; ``action_token_ids`` are the
    encoded action plus the eos token (``with_stop_token``) unless ``generated_ids``
    gives them; ``action_logprobs`` are made-up negative numbers, one per token.

    Args:
        tokenizer: A Hugging Face tokenizer (e.g. from :func:`build_chat_tokenizer`).
        actions: The assistant's text per turn.
        replies: The env's reply after each turn (the last one ends the episode).
        rewards: One reward per turn.
        first_prompt: The first user message.
        system: An optional system message.
        start_state_id: Group id of the episode.
        episode_id: Id of the episode.
        with_stop_token: Append ``tokenizer.eos_token_id`` to generated ids.
        generated_ids: Explicit generated ids per turn (e.g. a non-canonical tokenisation).
    """
    if not len(actions) == len(replies) == len(rewards):
        raise ValueError("actions, replies and rewards need one entry per turn")
    history: list[Message] = [{"role": "system", "content": system}] if system is not None else []
    history.append({"role": "user", "content": first_prompt})
    observation = first_prompt
    turns: list[Turn] = []
    for index, (action, reply, reward) in enumerate(zip(actions, replies, rewards, strict=True)):
        if generated_ids is not None:
            ids = list(generated_ids[index])
        else:
            ids = list(tokenizer.encode(action, add_special_tokens=False))
            if with_stop_token:
                ids.append(int(tokenizer.eos_token_id))
        last = index == len(actions) - 1
        turns.append(
            Turn(
                observation=observation,
                action=action,
                reward=reward,
                terminated=last,
                next_observation=reply,
                prompt_messages=list(history),
                action_token_ids=ids,
                action_logprobs=[-0.5 - 0.01 * k for k in range(len(ids))],
            )
        )
        history = [*history, {"role": "assistant", "content": action}, {"role": "user", "content": reply}]
        observation = reply
    return Episode(turns, start_state_id=start_state_id, episode_id=episode_id)
