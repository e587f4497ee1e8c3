"""Hugging Face ``GPT2LMHeadModel`` under rubin, with no adapter.

``forward(input_ids)`` returns a ``CausalLMOutputWithCrossAttentions``; rubin takes its
``.logits``. The blocks (``transformer.h``, class ``GPT2Block``) are found automatically.
``rubin export RUN --format hf`` writes the ``save_pretrained`` layout, which
``GPT2LMHeadModel.from_pretrained`` loads. Needs ``pip install transformers``.

rubin: ``model.import: examples.byom.hf_gpt2:build`` (see hf_gpt2.yaml).
"""


def build(**kwargs):
    """``GPT2LMHeadModel(GPT2Config(**model.args))``: any GPT2Config field may be set in model.args."""
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(**kwargs))
