"""A real Hugging Face tokenizer with a ChatML chat template, built locally (no hub).

Shared by tests/wrappers and tests/test_runner.py (loaded by file path, since the test
suite runs with ``--import-mode=importlib``).
"""

from __future__ import annotations

from typing import Any

CHATML = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

_TEXT = [
    "I picked a whole number between 1 and 16. You have 5 guesses. Answer with a number, e.g. 7.",
    "8 is wrong; the number is higher. Correct, it was 12! system user assistant tool",
    "start ep t echo action 0123456789 You are a careful player.",
]


def build_chat_tokenizer() -> Any:
    """A byte-level BPE ``PreTrainedTokenizerFast`` whose eos is ``<|im_end|>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=350,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(_TEXT * 3, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        chat_template=CHATML,
    )


def load_builder() -> Any:
    return build_chat_tokenizer
