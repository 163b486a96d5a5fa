"""The official OpenAI Python SDK against qwen3-tts-server.

Usage: openai_sdk.py BASE_URL API_KEY OUT_DIR

Streams speech to a WAV file with `audio.speech.with_streaming_response.create`, streams
raw PCM chunk by chunk, and checks that a bad request raises the SDK's BadRequestError
with the server's error code. Prints `OK` at the end.
"""

import os
import struct
import sys

import openai


def main() -> None:
    base_url, api_key, out_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)

    # 1. Stream a WAV to a file, as the SDK's docs show.
    wav_path = os.path.join(out_dir, "speech.wav")
    with client.audio.speech.with_streaming_response.create(
        model="tts-1",
        voice="alloy",
        input="Hello from the OpenAI SDK, streamed by qwen3-tts-server.",
        response_format="wav",
        # seeded: the demo model's random weights end a reply at a random frame, and an
        # unseeded draw was once shorter than the half second checked below
        extra_body={"seed": 7},
    ) as response:
        assert response.headers["content-type"] == "audio/wav", response.headers
        assert response.headers.get("x-request-id"), "x-request-id header"
        response.stream_to_file(wav_path)
    data = open(wav_path, "rb").read()
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE", data[:12]
    assert data[12:16] == b"fmt ", data[12:16]
    fmt_tag, channels, rate, _, _, bits = struct.unpack("<HHIIHH", data[20:36])
    assert (fmt_tag, channels, rate, bits) == (1, 1, 24000, 16), (fmt_tag, channels, rate, bits)
    assert data[36:40] == b"data", data[36:40]
    samples = (len(data) - 44) // 2
    assert samples > 24000 // 2, samples  # more than half a second of audio
    assert (len(data) - 44) % 2 == 0
    print(f"wav: {len(data)} bytes, {samples} samples at {rate} Hz")

    # 2. Raw PCM, consumed chunk by chunk while it streams.
    chunks = 0
    total = 0
    with client.audio.speech.with_streaming_response.create(
        model="gpt-4o-mini-tts",
        voice="nova",
        input="Chunks arrive as they are generated.",
        response_format="pcm",
        extra_body={"seed": 7, "language": "english"},
    ) as response:
        assert response.headers["content-type"] == "audio/pcm"
        assert response.headers["x-sample-rate"] == "24000"
        assert response.headers["x-seed"] == "7"
        for chunk in response.iter_bytes():
            chunks += 1
            total += len(chunk)
    assert total > 0 and total % 2 == 0, total
    print(f"pcm: {total} bytes in {chunks} chunks")

    # 3. Errors come back as the SDK's typed exceptions, with our code.
    try:
        client.audio.speech.create(model="tts-1", voice="nobody", input="hi")
    except openai.BadRequestError as e:
        assert e.status_code == 400
        assert e.code == "unknown_voice", e.body
        assert e.param == "voice", e.body
    else:
        raise AssertionError("an unknown voice must fail")
    # `speed` within OpenAI's 0.25-4: the same seeded audio, half as long at 2.0
    lengths = {}
    for speed in (1.0, 2.0):
        r = client.audio.speech.create(
            model="tts-1", voice="alloy", input="Speed check.", speed=speed,
            response_format="pcm", extra_body={"seed": 7},
        )
        lengths[speed] = len(r.content) // 2
    # (the server rounds half away from zero, Python's round() to even)
    assert abs(lengths[2.0] - lengths[1.0] / 2.0) <= 0.5, lengths
    try:
        client.audio.speech.create(model="tts-1", voice="alloy", input="hi", speed=8.0)
    except openai.BadRequestError as e:
        assert e.param == "speed", e.body
    else:
        raise AssertionError("speed 8.0 must fail")
    bad_key = openai.OpenAI(base_url=base_url, api_key="wrong", max_retries=0)
    try:
        bad_key.audio.speech.create(model="tts-1", voice="alloy", input="hi")
    except openai.AuthenticationError as e:
        assert e.status_code == 401
    else:
        raise AssertionError("a wrong key must fail")
    print("OK")


if __name__ == "__main__":
    main()
