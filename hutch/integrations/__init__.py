"""hutch as an agent's shell and file tools: one set of tools (`tools.py`), in each framework's
native form (`openai_agents`, `langchain`, `claude_agent`, `letta`), an MCP server (`mcp_server`),
and one box per conversation (`conversation`). Each framework is an optional extra
(`pip install hutch[openai-agents]`); importing a module for a framework that is not installed
says which extra to install."""
