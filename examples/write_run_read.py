"""Write a script, run it, read what it wrote (LangChain tool calling with the sandbox's tools).

    python examples/write_run_read.py [--offline]
"""

from __future__ import annotations

from _offline import MODEL, openai_base_url
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_openai import ChatOpenAI

from hutch import Sandbox
from hutch.integrations.langchain import sandbox_tools
from hutch.integrations.scripted_model import answer, call

PRIMES = "n = [p for p in range(2, 50) if all(p % d for d in range(2, p))]\nopen('/home/user/primes.txt', 'w').write(str(n))\n"
SCRIPT = [call("write_file", path="/home/user/primes.py", content=PRIMES),
          call("bash", command="python3 /home/user/primes.py"),
          call("read_file", path="/home/user/primes.txt"),
          answer("The primes below 50 are in /home/user/primes.txt.")]

sandbox = Sandbox.create("write-run-read-example")
try:
    tools = {t.name: t for t in sandbox_tools(sandbox)}
    with openai_base_url(SCRIPT) as base_url:
        llm = ChatOpenAI(model=MODEL, base_url=base_url, api_key="offline" if base_url else None)
        llm_with_tools = llm.bind_tools(list(tools.values()))
        messages: list = [HumanMessage("Write a Python script that saves the primes below 50 to "
                                       "/home/user/primes.txt, run it, and read the file.")]
        while (reply := llm_with_tools.invoke(messages)).tool_calls:
            messages.append(reply)
            for tc in reply.tool_calls:
                output = tools[tc["name"]].invoke(tc["args"])
                print(f"[{tc['name']}] {output.splitlines()[0] if output else ''}")
                messages.append(ToolMessage(output, tool_call_id=tc["id"]))
    print(reply.content)
    print("file:", sandbox.files.read_text("/home/user/primes.txt"))
finally:
    sandbox.kill()
