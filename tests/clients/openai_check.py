"""The `openai` Python package (tests/clients/requirements.txt) against an OpenAI-compatible
service behind `tandem proxy`: completions and chat completions, streamed and not, the model
list, and a refused request. Prints one JSON object for crates/tandem/tests/llm.rs to check.

    openai_check.py BASE_URL   (for example http://127.0.0.1:7280/s/llm/v1)
"""
import json
import sys

import openai
from openai import OpenAI

base = sys.argv[1]
client = OpenAI(base_url=base, api_key="sk-tandem-test", max_retries=0, timeout=60)
prompt = "Once upon a time, in a cluster far away, "
messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say something."}]
out = {"openai_version": openai.__version__}

out["models"] = [m.id for m in client.models.list()]

r = client.completions.create(model="m", prompt=prompt, max_tokens=5, temperature=0)
out["completion"] = r.choices[0].text
out["completion_finish"] = r.choices[0].finish_reason
out["completion_tokens"] = r.usage.completion_tokens

chunks = client.completions.create(model="m", prompt=prompt, max_tokens=5, temperature=0, stream=True)
out["completion_stream"] = "".join(c.choices[0].text for c in chunks if c.choices)

r = client.chat.completions.create(model="m", messages=messages, max_tokens=6, temperature=0)
out["chat"] = r.choices[0].message.content
out["chat_role"] = r.choices[0].message.role

stream = client.chat.completions.create(
    model="m", messages=messages, max_tokens=6, temperature=0, stream=True, stream_options={"include_usage": True}
)
parts, usage = [], None
for c in stream:
    if c.choices and c.choices[0].delta.content:
        parts.append(c.choices[0].delta.content)
    if c.usage is not None:
        usage = c.usage.completion_tokens
out["chat_stream"] = "".join(parts)
out["chat_stream_usage"] = usage

try:
    client.completions.create(model="no-such-model", prompt=prompt, max_tokens=1)
    out["refused"] = None
except openai.APIStatusError as e:
    out["refused"] = {"class": type(e).__name__, "status": e.status_code, "message": str(e)}

print(json.dumps(out))
