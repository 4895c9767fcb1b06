"""Our conversation (`policy.conversation`) in a tokenizer's chat format: the one mapping that serving and training
both use, so the model is trained on exactly the prompts it is served."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

from agent_sre.models.policy import ChatMessage
from agent_sre.models.trajectory import Trajectory
from agent_sre.policy.conversation import pending_messages

if TYPE_CHECKING:
    from transformers import BatchEncoding, PreTrainedTokenizerBase

# Small chat models (SmolLM2's ChatML) were never trained on a "tool" role: a tool's output is a user turn
# that says what it is.
TOOL_RESULT_PREFIX = "Tool result:\n"

# SmolLM2-Instruct's ChatML template, with `{% generation %}` markers around what the assistant says, end-of-turn
# included (so the model learns to stop). The markers only drive the assistant-token mask of training; the
# rendered text is identical to the original template's (checked when it is installed: `install_chat_template`).
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\n' }}{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{{ '\n' }}"
    "{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_PROBE = [{"role": "system", "content": "rules"}, {"role": "user", "content": "alert"},
          {"role": "assistant", "content": '{"tool": "list_pods", "args": {}}'},
          {"role": "user", "content": TOOL_RESULT_PREFIX + "NAME READY"}]


def chat_messages(messages: Iterable[ChatMessage]) -> list[dict[str, str]]:
    """Our messages as chat-template messages (the `tool` role becomes a prefixed user turn)."""
    return [{"role": "user", "content": TOOL_RESULT_PREFIX + m.content} if m.role == "tool"
            else {"role": m.role, "content": m.content} for m in messages]


def prompt_messages(trajectory: Trajectory) -> list[ChatMessage]:
    """Everything the model sees before its next answer: the conversation so far plus what it has not seen yet."""
    return [*trajectory.conversation, *pending_messages(trajectory)]


def render_chat(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]], *,
                add_generation_prompt: bool = False, chat_template: str | None = None) -> str:
    """One conversation as the chat template (the tokenizer's own unless given) writes it, before tokenising."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                         chat_template=chat_template)
    if not isinstance(text, str):
        raise TypeError(f"the chat template rendered {type(text).__name__}, not the text of one conversation")
    return text


def chat_token_ids(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]], *,
                   add_generation_prompt: bool = False) -> list[int]:
    """One conversation's token ids, as the chat template renders and the tokenizer splits it."""
    encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=True,
                                            return_dict=True)
    return list(cast("BatchEncoding", encoded)["input_ids"])


def decode_text(tokenizer: PreTrainedTokenizerBase, ids: list[int], *, skip_special_tokens: bool = False) -> str:
    """The text of one sequence of token ids."""
    return cast(str, tokenizer.decode(ids, skip_special_tokens=skip_special_tokens))


def prompt_token_ids(tokenizer: PreTrainedTokenizerBase, messages: Iterable[ChatMessage]) -> list[int]:
    """The token ids a model is prompted with, ending with the assistant header it completes."""
    return chat_token_ids(tokenizer, chat_messages(messages), add_generation_prompt=True)


def install_chat_template(tokenizer: PreTrainedTokenizerBase) -> None:
    """Give a ChatML tokenizer our marked-up copy of its template, after checking both render the same text."""
    original = tokenizer.chat_template
    rendered = render_chat(tokenizer, _PROBE, add_generation_prompt=True)
    ours = render_chat(tokenizer, _PROBE, add_generation_prompt=True, chat_template=CHATML_TEMPLATE)
    if rendered != ours:
        raise ValueError("the tokenizer's chat template is not SmolLM2's ChatML; keep its own template "
                         f"(it renders {rendered!r}, ours {ours!r})")
    if original != CHATML_TEMPLATE:
        tokenizer.chat_template = CHATML_TEMPLATE
