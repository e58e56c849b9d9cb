"""Images, sound and files beside a user message, through each real SDK to its fake (which
checks each provider's own shape for them), and a model that refuses them."""

from __future__ import annotations

import base64

import pytest

import ethan_llm
from ethan_llm.types import Attachment, Message, Sampling, ToolChoice, ToolSpec

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 32).decode()
PDF = base64.b64encode(b"%PDF-1.4\n%%EOF").decode()
WAV = base64.b64encode(b"RIFF\0\0\0\0WAVE").decode()
QUESTION = Message(
    role="user",
    content="What is in these?",
    attachments=(
        Attachment(kind="image", mime="image/png", data=PNG),
        Attachment(kind="file", mime="application/pdf", data=PDF, name="notes.pdf"),
        Attachment(kind="audio", mime="audio/wav", data=WAV),
    ),
)


def test_attachments_reach_each_provider_in_its_own_shape(provider):
    provider.fake.reply(provider.text("A square, a PDF and a sound."))
    completion = ethan_llm.complete(model=provider.model, messages=[QUESTION])
    assert completion.text == "A square, a PDF and a sound."
    [request] = provider.fake.requests
    body = request.body
    if provider.name == "openai":
        parts = body["messages"][-1]["content"]
        assert parts == [
            {"type": "text", "text": "What is in these?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            {
                "type": "file",
                "file": {
                    "filename": "notes.pdf",
                    "file_data": f"data:application/pdf;base64,{PDF}",
                },
            },
            {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}},
        ]
    elif provider.name == "anthropic":
        blocks = body["messages"][-1]["content"]
        assert blocks[1] == {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": PNG},
        }
        assert blocks[2]["type"] == "document" and blocks[2]["title"] == "notes.pdf"
        # Messages takes no sound: its placeholder, which the model then says it cannot hear.
        assert blocks[3] == {
            "type": "text",
            "text": "[audio] (attached, but this model cannot take it: say so)",
        }
    else:
        parts = body["contents"][-1]["parts"]
        inline = [p.get("inlineData") or p.get("inline_data") for p in parts[1:]]
        assert [(i.get("mimeType") or i.get("mime_type")) for i in inline] == [
            "image/png",
            "application/pdf",
            "audio/wav",
        ]
        assert inline[0]["data"] == PNG


def test_a_model_that_refuses_attachments_is_asked_again_with_their_placeholders(provider):
    provider.fake.reply(provider.error(400, "this model does not support images"), status=400)
    provider.fake.reply(provider.text("I cannot see the image you attached."))
    completion = ethan_llm.complete(model=provider.model, messages=[QUESTION])
    assert completion.text == "I cannot see the image you attached."
    _, second = provider.fake.requests
    again = str(second.body)
    assert PNG not in again and "[image]" in again and "[file: notes.pdf]" in again
    assert "cannot take it" in again


def test_a_refusal_without_attachments_stands(provider):
    provider.fake.reply(provider.error(400, "bad request"), status=400)
    with pytest.raises(ethan_llm.ModelRequestError):
        ethan_llm.complete(model=provider.model, messages=[Message.user("hi")])
    assert len(provider.fake.requests) == 1


WEATHER = ToolSpec("get_weather", "The weather now.", {"type": "object", "properties": {}})


def test_tool_choice_and_sampling_in_each_providers_words(provider):
    provider.fake.reply(provider.text("ok"))
    ethan_llm.complete(
        model=provider.model,
        messages=[Message.user("hi")],
        tools=[WEATHER],
        tool_choice=ToolChoice(mode="function", name="get_weather"),
        parallel_tool_calls=False,
        sampling=Sampling(temperature=0.5, top_p=0.8, stop=("END",), seed=3, user="u1"),
    )
    body = provider.fake.requests[0].body
    if provider.name == "openai":
        assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
        assert (body["parallel_tool_calls"], body["temperature"], body["seed"]) == (False, 0.5, 3)
        assert (body["stop"], body["user"]) == (["END"], "u1")
    elif provider.name == "anthropic":
        assert body["tool_choice"] == {
            "type": "tool",
            "name": "get_weather",
            "disable_parallel_tool_use": True,
        }
        assert body["stop_sequences"] == ["END"]
        assert "temperature" not in body  # the SDK takes none (docs/openai.md)
        assert body["metadata"] == {"user_id": "u1"}
    else:
        config = body["generationConfig"]
        assert (config["temperature"], config["topP"], config["seed"]) == (0.5, 0.8, 3)
        assert config["stopSequences"] == ["END"]
        calling = body["toolConfig"]["functionCallingConfig"]
        assert calling["mode"] == "ANY" and calling["allowedFunctionNames"] == ["get_weather"]
